package podlife

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/sandbox"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The checkpoint side of the fakes: the world is pod "pod".

func (f fakeSandboxes) Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	f.w.log("pod run " + handler)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.ready, f.w.runCfg = true, cfg
	return "newpod", nil
}

func (f fakeSandboxes) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if id != "pod" {
		return nil, fmt.Errorf("pod %s: %w", id, errdefs.ErrNotFound)
	}
	sb := &sandbox.Sandbox{ID: id, State: sandbox.StateNotReady, Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Uid: "u1", Namespace: "ns"},
	}}
	if f.w.ready {
		sb.State = sandbox.StateReady
	}
	if f.w.sharedPID {
		sb.PIDNSPath = "/run/pid"
	}
	return sb, nil
}

func (f fakeSandboxes) Freeze(ctx context.Context, id string) error {
	f.w.log("freeze " + id)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if f.w.freezeErr != nil {
		return f.w.freezeErr
	}
	f.w.frozen = true
	return nil
}

func (f fakeSandboxes) Thaw(ctx context.Context, id string) error {
	// Thaw must run even when the caller's context is done.
	f.w.log(fmt.Sprintf("thaw %s ctxerr=%v", id, ctx.Err()))
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if f.w.thawErr != nil {
		return f.w.thawErr
	}
	f.w.frozen = false
	return nil
}

func (f fakeContainers) List(ctx context.Context, flt *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range f.w.list {
		if flt.GetPodSandboxId() == "" || c.GetPodSandboxId() == flt.GetPodSandboxId() {
			out = append(out, c)
		}
	}
	return out, nil
}

// Pause holds a container at the cut: it fails unless the pod is frozen.
func (f fakeContainers) Pause(ctx context.Context, id string) error {
	f.w.log("pause " + id[:4])
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if !f.w.frozen {
		return fmt.Errorf("pause %s: not at the pod's cut (pod not frozen)", id)
	}
	if id == f.w.failPause {
		return fmt.Errorf("pause %s: %w", id, errdefs.ErrPrecondition)
	}
	if f.w.paused == nil {
		f.w.paused = map[string]bool{}
	}
	f.w.paused[id] = true
	return nil
}

func (f fakeContainers) Resume(ctx context.Context, id string) error {
	f.w.log(fmt.Sprintf("resume %s ctxerr=%v", id[:4], ctx.Err()))
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	delete(f.w.paused, id)
	return nil
}

// Checkpoint writes a stand-in archive. Like runc and CRIU it needs the
// container paused (held at the pod's cut) and the slice thawed: CRIU
// hangs on tasks an ancestor cgroup keeps frozen.
func (f fakeContainers) Checkpoint(ctx context.Context, id, location string, _ time.Duration) error {
	f.w.log("checkpoint " + id[:4])
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if f.w.frozen {
		return fmt.Errorf("checkpoint %s: slice frozen, CRIU's parasite cannot run", id)
	}
	for _, c := range f.w.list {
		if c.PodSandboxId == "pod" && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && !f.w.paused[c.Id] {
			return fmt.Errorf("checkpoint %s: container %s not held at the cut", id, c.Id[:4])
		}
	}
	if id == f.w.failCkpt {
		return fmt.Errorf("checkpoint %s: criu failed: %w", id, errdefs.ErrPrecondition)
	}
	return os.WriteFile(location, []byte("archive of "+id), 0o600)
}

func hexID(c byte) string { return strings.Repeat(string(c), 64) }

// ckWorld is a ready pod "pod" with running containers a and b, a
// created container c, and a running container of another pod.
func ckWorld() *world {
	ctr := func(id, pod, name string, st runtimeapi.ContainerState) *runtimeapi.Container {
		return &runtimeapi.Container{Id: id, PodSandboxId: pod, Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image: &runtimeapi.ImageSpec{Image: "busybox:" + name}, ImageRef: "busybox@sha256:" + name, ImageId: "id" + name, State: st}
	}
	return &world{ready: true, list: []*runtimeapi.Container{
		ctr(hexID('a'), "pod", "a", runtimeapi.ContainerState_CONTAINER_RUNNING),
		ctr(hexID('b'), "pod", "b", runtimeapi.ContainerState_CONTAINER_RUNNING),
		ctr(hexID('c'), "pod", "c", runtimeapi.ContainerState_CONTAINER_CREATED),
		ctr(hexID('d'), "other", "d", runtimeapi.ContainerState_CONTAINER_RUNNING),
	}}
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func TestCheckpointPodFreezesDumpsThaws(t *testing.T) {
	w := ckWorld()
	p := newPods(w)
	dir := t.TempDir()
	if err := p.Checkpoint(context.Background(), "pod", dir, []string{hexID('a'), hexID('b')}); err != nil {
		t.Fatal(err)
	}
	want := []string{"freeze pod", "pause aaaa", "pause bbbb", "thaw pod ctxerr=<nil>", "checkpoint aaaa", "checkpoint bbbb",
		"resume aaaa ctxerr=<nil>", "resume bbbb ctxerr=<nil>"}
	if got := w.seen(); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if w.frozen || len(w.paused) != 0 {
		t.Errorf("pod left frozen (%v) or paused: %v", w.frozen, w.paused)
	}
	wantFiles := []string{"containers", "containers/" + hexID('a') + ".tar", "containers/" + hexID('b') + ".tar", "pod.json"}
	if got := entries(t, dir); !slices.Equal(got, wantFiles) {
		t.Errorf("files %q, want %q", got, wantFiles)
	}
	m, err := readManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.PodID != "pod" || len(m.Containers) != 2 || m.Containers[1] != (manifestContainer{Name: "b", ID: hexID('b'), Image: "busybox:b", ImageRef: "busybox@sha256:b", ImageID: "idb"}) ||
		!strings.Contains(strings.ReplaceAll(string(m.PodConfig), " ", ""), `"uid":"u1"`) {
		t.Errorf("manifest %+v %s", m, m.PodConfig)
	}
}

// Whatever fails after the freeze, the pod is thawed and no part of the
// checkpoint stays in the directory.
func TestCheckpointPodThawsOnEveryError(t *testing.T) {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		setup    func(w *world)
		ctx      context.Context
		code     error
		wantThaw bool
	}{
		{"second dump fails", func(w *world) { w.failCkpt = hexID('b') }, nil, errdefs.ErrPrecondition, true},
		{"first dump fails", func(w *world) { w.failCkpt = hexID('a') }, nil, errdefs.ErrPrecondition, true},
		{"caller's deadline gone", func(w *world) { w.failCkpt = hexID('a') }, expired, errdefs.ErrPrecondition, true},
		{"thaw fails", func(w *world) { w.thawErr = fmt.Errorf("bus gone: %w", errdefs.ErrUnavailable) }, nil, errdefs.ErrUnavailable, true},
		{"second pause fails", func(w *world) { w.failPause = hexID('b') }, nil, errdefs.ErrPrecondition, true},
		{"freeze times out", func(w *world) { w.freezeErr = fmt.Errorf("freeze: %w", errdefs.ErrDeadline) }, nil, errdefs.ErrDeadline, true},
		// systemd refused: nothing was frozen (cgroup v1: NotSupported).
		{"no freezer", func(w *world) { w.freezeErr = fmt.Errorf("freeze: NotSupported: %w", errdefs.ErrPrecondition) }, nil, errdefs.ErrPrecondition, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ckWorld()
			tc.setup(w)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			dir := t.TempDir()
			err := newPods(w).Checkpoint(ctx, "pod", dir, []string{hexID('a'), hexID('b')})
			if !errors.Is(err, tc.code) {
				t.Fatalf("err %v, want %v", err, tc.code)
			}
			calls := w.seen()
			thawed := slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "thaw pod ctxerr=<nil>") })
			if thawed != tc.wantThaw {
				t.Errorf("thawed %v, want %v: %q", thawed, tc.wantThaw, calls)
			}
			if w.frozen && w.thawErr == nil {
				t.Error("pod left frozen")
			}
			if len(w.paused) != 0 {
				t.Errorf("containers left paused: %v", w.paused)
			}
			// Every container paused is resumed, after the thaw.
			var pauses, resumes int
			thawAt := -1
			for i, c := range calls {
				switch {
				case strings.HasPrefix(c, "pause "):
					pauses++
				case strings.HasPrefix(c, "resume "):
					resumes++
					if !strings.HasSuffix(c, "ctxerr=<nil>") || i < thawAt {
						t.Errorf("resume %q at %d, thaw at %d", c, i, thawAt)
					}
				case strings.HasPrefix(c, "thaw "):
					thawAt = i
				}
			}
			if w.failPause != "" {
				pauses-- // the failed one
			}
			if pauses != resumes {
				t.Errorf("%d pauses, %d resumes: %q", pauses, resumes, calls)
			}
			if got := entries(t, dir); len(got) != 0 {
				t.Errorf("left in the directory: %q", got)
			}
		})
	}
}

// Bad input changes nothing: no freeze, nothing written.
func TestCheckpointPodRefusesBadInput(t *testing.T) {
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o600)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(t.TempDir(), link)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	a, b, c, d := hexID('a'), hexID('b'), hexID('c'), hexID('d')
	for _, tc := range []struct {
		name  string
		pod   string
		dir   string
		ids   []string
		setup func(w *world)
		code  error
	}{
		{"relative dir", "pod", "out", []string{a}, nil, errdefs.ErrInvalid},
		{"unclean dir", "pod", "/tmp/../tmp", []string{a}, nil, errdefs.ErrInvalid},
		{"no dir", "pod", "", []string{a}, nil, errdefs.ErrInvalid},
		{"missing dir", "pod", "/nonexistent/podunit", []string{a}, nil, errdefs.ErrInvalid},
		{"dir not empty", "pod", full, []string{a}, nil, errdefs.ErrInvalid},
		{"dir is a symlink", "pod", link, []string{a}, nil, errdefs.ErrInvalid},
		{"dir is a file", "pod", file, []string{a}, nil, errdefs.ErrInvalid},
		{"no containers", "pod", "", nil, nil, errdefs.ErrInvalid},
		{"twice", "pod", "", []string{a, a}, nil, errdefs.ErrInvalid},
		{"unknown pod", "nopod", "", []string{a}, nil, errdefs.ErrNotFound},
		{"unknown container", "pod", "", []string{a, hexID('e')}, nil, errdefs.ErrNotFound},
		{"other pod's container", "pod", "", []string{a, d}, nil, errdefs.ErrNotFound},
		{"not running", "pod", "", []string{a, c}, nil, errdefs.ErrPrecondition},
		{"pod not ready", "pod", "", []string{a, b}, func(w *world) { w.ready = false }, errdefs.ErrPrecondition},
		{"shared PID namespace", "pod", "", []string{a, b}, func(w *world) { w.sharedPID = true }, errdefs.ErrPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ckWorld()
			if tc.setup != nil {
				tc.setup(w)
			}
			dir := tc.dir
			var empty string
			if dir == "" && tc.name != "no dir" {
				empty = t.TempDir()
				dir = empty
			}
			err := newPods(w).Checkpoint(context.Background(), tc.pod, dir, tc.ids)
			if !errors.Is(err, tc.code) {
				t.Fatalf("err %v, want %v", err, tc.code)
			}
			if calls := w.seen(); len(calls) != 0 {
				t.Errorf("calls %q", calls)
			}
			if empty != "" {
				if got := entries(t, empty); len(got) != 0 {
					t.Errorf("written: %q", got)
				}
			}
		})
	}
}

func checkpointed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := newPods(ckWorld()).Checkpoint(context.Background(), "pod", dir, []string{hexID('a'), hexID('b')}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func restoreReq(dir string, names ...string) RestoreRequest {
	r := RestoreRequest{Dir: dir, Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Uid: "u2"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}}},
	}}
	for _, n := range names {
		r.Containers = append(r.Containers, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: n}, Image: &runtimeapi.ImageSpec{Image: "busybox:" + n}, LogPath: n + ".log",
		})
	}
	return r
}

func TestRestorePodCreatesFromArchives(t *testing.T) {
	dir := checkpointed(t)
	w := &world{}
	pod, ctrs, err := newPods(w).Restore(context.Background(), restoreReq(dir, "b", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if pod != "newpod" || w.runCfg.GetMetadata().GetUid() != "u2" {
		t.Errorf("pod %s config %v", pod, w.runCfg)
	}
	if len(ctrs) != 2 || ctrs[0].Name != "b" || ctrs[0].ContainerId != "b" || ctrs[1].Name != "a" {
		t.Errorf("restored %v", ctrs)
	}
	// Each container is created from its own archive, with the
	// request's settings.
	for i, n := range []string{"b", "a"} {
		c := w.created[i]
		if c.GetImage().GetImage() != filepath.Join(dir, "containers", hexID(n[0])+".tar") || c.GetLogPath() != n+".log" {
			t.Errorf("container %s created with %v", n, c)
		}
	}
	if got := w.seen(); !slices.Equal(got, []string{"pod run ", "create b", "create a"}) {
		t.Errorf("calls %q", got)
	}
}

// A container that cannot be created takes the new pod and the containers
// created before it along.
func TestRestorePodRemovesPodOnError(t *testing.T) {
	dir := checkpointed(t)
	w := &world{failCreate: "b"}
	_, _, err := newPods(w).Restore(context.Background(), restoreReq(dir, "a", "b"))
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("err %v", err)
	}
	want := []string{"pod run ", "create a", "ctr remove a", "pod remove newpod"}
	if got := w.seen(); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

func TestRestorePodRefusesBadInput(t *testing.T) {
	edit := func(f func(dir string)) func(t *testing.T) string {
		return func(t *testing.T) string {
			dir := checkpointed(t)
			f(dir)
			return dir
		}
	}
	manifest := func(f func(m map[string]any)) func(t *testing.T) string {
		return edit(func(dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "pod.json"))
			var m map[string]any
			json.Unmarshal(b, &m)
			f(m)
			b, _ = json.Marshal(m)
			os.WriteFile(filepath.Join(dir, "pod.json"), b, 0o600)
		})
	}
	ctr0 := func(m map[string]any) map[string]any { return m["containers"].([]any)[0].(map[string]any) }
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
		req  func(r *RestoreRequest)
	}{
		{"relative path", func(*testing.T) string { return "ckpt" }, nil},
		{"not a checkpoint", func(t *testing.T) string { return t.TempDir() }, nil},
		{"hostile container ID", manifest(func(m map[string]any) { ctr0(m)["id"] = "../../../../etc/shadow" }), nil},
		{"wrong version", manifest(func(m map[string]any) { m["version"] = 7 }), nil},
		{"duplicate name", manifest(func(m map[string]any) { ctr0(m)["name"] = "b" }), nil},
		{"archive is a symlink", edit(func(dir string) {
			p := filepath.Join(dir, "containers", hexID('a')+".tar")
			os.Remove(p)
			os.Symlink("/etc/passwd", p)
		}), nil},
		{"containers dir is a symlink", edit(func(dir string) {
			os.Rename(filepath.Join(dir, "containers"), filepath.Join(dir, "elsewhere"))
			os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(dir, "containers"))
		}), nil},
		{"pod.json is a symlink", edit(func(dir string) {
			os.Rename(filepath.Join(dir, "pod.json"), filepath.Join(dir, "m.json"))
			os.Symlink(filepath.Join(dir, "m.json"), filepath.Join(dir, "pod.json"))
		}), nil},
		{"no pod config", nil, func(r *RestoreRequest) { r.Config = nil }},
		{"no container configs", nil, func(r *RestoreRequest) { r.Containers = nil }},
		{"a container missing", nil, func(r *RestoreRequest) { r.Containers = r.Containers[:1] }},
		{"unknown container", nil, func(r *RestoreRequest) { r.Containers[1].Metadata.Name = "x" }},
		{"name twice", nil, func(r *RestoreRequest) { r.Containers[1].Metadata.Name = "a" }},
		{"no name", nil, func(r *RestoreRequest) { r.Containers[1].Metadata = nil }},
		{"other image", nil, func(r *RestoreRequest) { r.Containers[0].Image.Image = "nginx" }},
		{"shared PID namespace", nil, func(r *RestoreRequest) {
			r.Config.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dir string
			if tc.dir != nil {
				dir = tc.dir(t)
			} else {
				dir = checkpointed(t)
			}
			var before []string
			if filepath.IsAbs(dir) {
				before = entries(t, dir)
			}
			req := restoreReq(dir, "a", "b")
			if tc.req != nil {
				tc.req(&req)
			}
			w := &world{}
			_, _, err := newPods(w).Restore(context.Background(), req)
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("err %v, want InvalidArgument", err)
			}
			if calls := w.seen(); len(calls) != 0 {
				t.Errorf("calls %q", calls)
			}
			if !filepath.IsAbs(dir) {
				return
			}
			if after := entries(t, dir); !slices.Equal(before, after) {
				t.Errorf("checkpoint changed: %q -> %q", before, after)
			}
		})
	}
	// The image may be named by digest or ID too.
	for _, img := range []string{"busybox@sha256:a", "ida", "sha256:ida"} {
		req := restoreReq(checkpointed(t), "a", "b")
		req.Containers[0].Image.Image = img
		if _, _, err := newPods(&world{}).Restore(context.Background(), req); err != nil {
			t.Errorf("image %s: %v", img, err)
		}
	}
}
