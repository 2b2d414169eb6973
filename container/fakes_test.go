package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/imagestore"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/systemd/systemdtest"
	"github.com/podunit/podunit/unitprops"
	"go.podman.io/storage/pkg/archive"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeImages struct {
	mu      sync.Mutex
	dir     string
	rootfs  map[string]bool // id -> mounted
	created map[string]bool
	volumes map[string][]string // id -> image IDs mounted
	// volumeDirs makes mounted volumes real directories with an etc/.
	volumeDirs bool
	// changes are what RootfsChanges answers.
	changes []archive.Change
	// deleteHook, if set, runs first in DeleteRootfs (outside the lock),
	// and deleteErr, if set, fails it (then cleared: once).
	deleteHook func(id string)
	deleteErr  error
}

func (f *fakeImages) Resolve(ctx context.Context, ref string) (*imagestore.ImageInfo, error) {
	if ref != "busybox" && ref != "sha256:aaaa" && ref != "aaaa" {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return &imagestore.ImageInfo{
		ID: "aaaa", RepoTags: []string{"docker.io/library/busybox:latest"},
		RepoDigests: []string{"docker.io/library/busybox@sha256:bbbb"},
		Config:      imgspecv1.ImageConfig{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}, StopSignal: "SIGQUIT"},
	}, nil
}

func (f *fakeImages) CreateContainerRootfs(ctx context.Context, id, imageRef, name string, idmap *imagestore.IDMap) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	root := filepath.Join(f.dir, id)
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n"), 0o644); err != nil {
		return err
	}
	f.created[id] = true
	return nil
}

func (f *fakeImages) MountRootfs(ctx context.Context, id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.created[id] {
		return "", fmt.Errorf("rootfs %s: %w", id, errdefs.ErrNotFound)
	}
	f.rootfs[id] = true
	return filepath.Join(f.dir, id), nil
}

func (f *fakeImages) UnmountRootfs(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.rootfs, id)
	return nil
}

func (f *fakeImages) DeleteRootfs(ctx context.Context, id string) error {
	f.mu.Lock()
	hook := f.deleteHook
	f.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.deleteErr; err != nil {
		f.deleteErr = nil
		return err
	}
	delete(f.rootfs, id) // as storage's removal, which unmounts first
	delete(f.created, id)
	return os.RemoveAll(filepath.Join(f.dir, id))
}

func (f *fakeImages) MountImageVolume(ctx context.Context, id, imageRef string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.volumes[id] = append(f.volumes[id], imageRef)
	p := filepath.Join(f.dir, "volumes", id, imageRef)
	if f.volumeDirs {
		if err := os.MkdirAll(filepath.Join(p, "etc"), 0o755); err != nil {
			return "", err
		}
	}
	return p, nil
}

func (f *fakeImages) RootfsChanges(ctx context.Context, id string) ([]archive.Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changes, nil
}

func (f *fakeImages) UnmountImageVolumes(ctx context.Context, id string) error { return nil }

// has reports whether id's writable layer exists.
func (f *fakeImages) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created[id]
}

func (f *fakeImages) setDeleteHook(h func(id string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteHook = h
}

func (f *fakeImages) DeleteImageVolumes(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.volumes, id)
	return nil
}

type fakePods struct{ logDir string }

func (p fakePods) Pod(ctx context.Context, id string) (*Pod, error) {
	if id != "pod1" && id != "pod2" {
		return nil, fmt.Errorf("pod %s: %w", id, errdefs.ErrNotFound)
	}
	return &Pod{ID: id, Config: sandboxConfig(id), Slice: "kubepods-besteffort-" + id + ".slice", LogDirectory: p.logDir}, nil
}

func sandboxConfig(id string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web-" + id, Namespace: "default", Uid: "uid-" + id},
		Hostname: "web",
	}
}

type fakeRuntime struct {
	// features and featuresErr are what Features answers.
	features    oci.Features
	featuresErr error
	mu          sync.Mutex
	deleted     []string
	exec        func(ctx context.Context, p oci.ExecProcess) (int, error)
	// updates are the resources Update was given; update, if set, runs
	// first and may fail the call.
	updates []*specs.LinuxResources
	update  func(id string, r *specs.LinuxResources) error
	// noCgroup plays crun: the container stays in the unit's cgroup.
	noCgroup bool
	// checkpoints are the Checkpoint calls; checkpointErr fails them.
	checkpoints   []oci.Checkpoint
	checkpointErr error
	paused        []string
	resumed       []string
}

func (r *fakeRuntime) Name() string { return "runc" }
func (r *fakeRuntime) CreateArgv(id, bundle, pidFile, logFile, consoleSocket string) []string {
	argv := []string{"/usr/sbin/runc", "--log", logFile, "--log-format", "json", "create", "--pid-file", pidFile, "-b", bundle}
	if consoleSocket != "" {
		argv = append(argv, "--console-socket", consoleSocket)
	}
	return append(argv, id)
}
func (r *fakeRuntime) StartArgv(id, logFile string) []string {
	return []string{"/usr/sbin/runc", "--log", logFile, "start", id}
}
func (r *fakeRuntime) DeleteArgv(id string) []string {
	return []string{"/usr/sbin/runc", "delete", "--force", id}
}
func (r *fakeRuntime) Exec(ctx context.Context, id string, p oci.ExecProcess) (int, error) {
	return r.exec(ctx, p)
}
func (r *fakeRuntime) Delete(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deleted = append(r.deleted, id)
	return nil
}

func (r *fakeRuntime) CheckpointArgv(id string, ck oci.Checkpoint) []string {
	return []string{"/usr/sbin/runc", "checkpoint", "--image-path", ck.ImagePath, "--work-path", ck.WorkPath, "--leave-running", id}
}
func (r *fakeRuntime) RestoreArgv(id, bundle, pidFile, logFile string, ck oci.Checkpoint) []string {
	return []string{"/usr/sbin/runc", "--log", logFile, "restore", "--detach", "--pid-file", pidFile, "-b", bundle, "--image-path", ck.ImagePath, "--work-path", ck.WorkPath, id}
}

// Checkpoint plays CRIU: an inventory file in the image dir, or
// checkpointErr after writing a dump.log.
func (r *fakeRuntime) Checkpoint(ctx context.Context, id string, ck oci.Checkpoint) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkpoints = append(r.checkpoints, ck)
	if r.checkpointErr != nil {
		_ = os.WriteFile(filepath.Join(ck.WorkPath, "dump.log"), []byte("(00.1) Error (criu/x.c:1): no luck\n"), 0o600)
		return r.checkpointErr
	}
	return os.WriteFile(filepath.Join(ck.ImagePath, "inventory.img"), []byte("criu"), 0o600)
}

func (r *fakeRuntime) Pause(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = append(r.paused, id)
	return nil
}

func (r *fakeRuntime) Resume(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resumed = append(r.resumed, id)
	return nil
}

func (r *fakeRuntime) OwnCgroup() bool { return !r.noCgroup }

func (r *fakeRuntime) Features(ctx context.Context) (oci.Features, error) {
	return r.features, r.featuresErr
}

func (r *fakeRuntime) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.update != nil {
		if err := r.update(id, res); err != nil {
			return err
		}
	}
	r.updates = append(r.updates, res)
	return nil
}

type fakeLogs struct {
	mu  sync.Mutex
	log []string
}

func (l *fakeLogs) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, s)
}

func (l *fakeLogs) calls() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.log, ",")
}

func (l *fakeLogs) Flush(ctx context.Context, id string) error {
	l.add("flush " + id)
	return nil
}

type env struct {
	t      testing.TB
	m      *Manager
	sd     *systemdtest.Fake
	imgs   *fakeImages
	rt     *fakeRuntime
	logs   *fakeLogs
	opts   Options
	deps   Deps
	logDir string
	// transientDir, when set, is the managers' systemd.TransientDir.
	transientDir string
	// managers are every manager newManager made: assertClean drains
	// their reapers.
	managers []*Manager
}

// newEnv builds a manager on fakes. The fake systemd plays ExecStopPost:
// stopping a unit writes the exit record a SIGTERMed init leaves.
func newEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, sd: systemdtest.New(), rt: &fakeRuntime{}, logDir: filepath.Join(dir, "logs"), logs: &fakeLogs{}}
	e.imgs = &fakeImages{dir: filepath.Join(dir, "storage"), rootfs: map[string]bool{}, created: map[string]bool{}, volumes: map[string][]string{}}
	e.opts = Options{
		StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"), Self: "/usr/bin/podunit",
		Caps: unitprops.Caps{SystemdVersion: 252}, CgroupRoot: filepath.Join(dir, "cgroup"),
	}
	if err := os.MkdirAll(e.opts.CgroupRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.opts.SetRuntime(config.Default().Runtime); err != nil {
		t.Fatal(err)
	}
	e.opts.StopMargin = time.Second
	e.deps = Deps{Systemd: e.sd, Images: e.imgs, Pods: fakePods{logDir: e.logDir}, Runtimes: map[string]oci.Runtime{"runc": e.rt}, Logs: e.logs}
	e.sd.StopFunc = func(u *systemdtest.Unit) systemd.JobResult {
		e.writeExit(idOfUnit(u.Name), &exitrec.Record{ServiceResult: "signal", ExitCode: "killed", ExitStatus: "TERM", FinishedAt: time.Now().UnixNano()})
		return systemd.JobDone
	}
	e.m = e.newManager()
	return e
}

func (e *env) newManager() *Manager {
	m, err := New(e.opts, e.deps)
	if err != nil {
		e.t.Fatal(err)
	}
	// The fake systemd keeps no transient files: ask it, unless a test
	// plays systemd's directory (e.transientDir).
	m.transientDir = e.transientDir
	if err := m.Recover(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.managers = append(e.managers, m)
	return m
}

// drain waits for every manager's deferred removals.
func (e *env) drain() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range e.managers {
		if err := m.Drain(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
}

// entries lists dir as podunit sees it: its trash directory does not
// count, what is inside it does.
func entries(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, d := range ents {
		if d.Name() != trashName {
			out = append(out, d.Name())
		}
	}
	ents, _ = os.ReadDir(filepath.Join(dir, trashName))
	for _, d := range ents {
		out = append(out, filepath.Join(trashName, d.Name()))
	}
	return out
}

func (e *env) writeExit(id string, r *exitrec.Record) {
	if err := exitrec.Write(filepath.Join(e.opts.StateDir, id), r); err != nil {
		e.t.Error(err)
	}
}

// exit makes a running container's init end on its own.
func (e *env) exit(id string, r *exitrec.Record) {
	e.writeExit(id, r)
	e.sd.Units[unitName(id)].ActiveState = "inactive"
	delete(e.sd.Units, unitName(id))
}

func containerConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: 1},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sleep", "inf"},
		Labels:   map[string]string{"app": name},
		LogPath:  name + "/1.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuShares: 512},
		},
	}
}

func (e *env) create(pod, name string) string {
	e.t.Helper()
	id, err := e.m.Create(context.Background(), pod, containerConfig(name), sandboxConfig(pod))
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) status(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	st, _, err := e.m.Status(context.Background(), id, false)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}
