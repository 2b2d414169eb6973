package container

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.podman.io/storage/pkg/archive"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
)

func checkpointEnv(t *testing.T) *env {
	t.Helper()
	old := criuBinary
	criuBinary = "sh"
	t.Cleanup(func() { criuBinary = old })
	e := newEnv(t)
	e.deps.Features = map[string]oci.Features{"runc": {Checkpoint: true}}
	e.m = e.newManager()
	return e
}

func (e *env) running(name string) string {
	e.t.Helper()
	id := e.create("pod1", name)
	if err := e.m.Start(context.Background(), id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func tarNames(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[strings.TrimPrefix(h.Name, "./")] = string(b)
	}
}

func TestCheckpointArchiveLayout(t *testing.T) {
	e := checkpointEnv(t)
	id := e.running("counter")
	root := filepath.Join(e.imgs.dir, id)
	if err := os.WriteFile(filepath.Join(root, "etc", "state"), []byte("42"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.imgs.changes = []archive.Change{
		{Path: "/etc/state", Kind: archive.ChangeAdd},
		{Path: "/etc/motd", Kind: archive.ChangeDelete},
	}
	loc := filepath.Join(t.TempDir(), "ck.tar")
	if err := e.m.Checkpoint(context.Background(), id, loc, 0); err != nil {
		t.Fatal(err)
	}
	got := tarNames(t, loc)
	for _, want := range []string{"checkpoint/inventory.img", "config.dump", "spec.dump", "container.dump", "rootfs-diff.tar", "deleted.files", "dump.log"} {
		if _, ok := got[want]; !ok && want != "dump.log" {
			t.Errorf("archive lacks %s: %v", want, slices.Sorted(func(yield func(string) bool) {
				for k := range got {
					if !yield(k) {
						return
					}
				}
			}))
		}
	}
	if !strings.Contains(got["config.dump"], `"rootfsImageRef": "aaaa"`) || !strings.Contains(got["container.dump"], `"sleep"`) {
		t.Errorf("metadata: config.dump %s container.dump %s", got["config.dump"], got["container.dump"])
	}
	if !strings.Contains(got["deleted.files"], "/etc/motd") {
		t.Errorf("deleted.files = %q", got["deleted.files"])
	}
	if ck := e.rt.checkpoints; len(ck) != 1 || !strings.HasSuffix(ck[0].ImagePath, "/checkpoint") {
		t.Errorf("runtime checkpoints: %+v", ck)
	}
	// The work directory is gone, the container still runs.
	if ents, _ := filepath.Glob(filepath.Join(e.opts.StateDir, id, "checkpoint-*")); len(ents) != 0 {
		t.Errorf("leftovers: %v", ents)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("state after checkpoint = %v", st.State)
	}

	// Restore: a new container from the archive, its rootfs diff applied,
	// its unit restoring instead of creating and starting.
	cfg := containerConfig("counter-restored")
	cfg.Image.Image = loc
	cfg.Command = nil
	rid, err := e.m.Create(context.Background(), "pod1", cfg, sandboxConfig("pod1"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(e.imgs.dir, rid, "etc", "state")); err != nil || string(b) != "42" {
		t.Errorf("restored rootfs etc/state = %q, %v", b, err)
	}
	if st := e.status(rid); st.GetMetadata().GetName() != "counter-restored" || st.GetImageRef() == "" {
		t.Errorf("restored status: %v", st)
	}
	if err := e.m.Start(context.Background(), rid); err != nil {
		t.Fatal(err)
	}
	u := e.sd.Units[unitName(rid)]
	if start := fmt.Sprint(u.Props["ExecStart"]); !strings.Contains(start, " restore --detach ") || !strings.Contains(start, rid+"/restore/checkpoint") {
		t.Errorf("ExecStart of a restore = %s", start)
	}
	if post, ok := u.Props["ExecStartPost"]; ok {
		t.Errorf("a restore has no start step, got ExecStartPost %v", post)
	}
	if _, err := os.Stat(filepath.Join(e.opts.StateDir, rid, "restore")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CRIU images kept after the restore: %v", err)
	}
	for _, id := range []string{id, rid} {
		if err := e.m.Remove(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	e.assertClean()
}

func TestCheckpointErrors(t *testing.T) {
	e := checkpointEnv(t)
	id := e.running("a")
	created := e.create("pod1", "b")
	dir := t.TempDir()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		id, loc string
		want    error
	}{
		"unknown id":     {"nosuch", filepath.Join(dir, "x.tar"), errdefs.ErrNotFound},
		"not running":    {created, filepath.Join(dir, "x.tar"), errdefs.ErrPrecondition},
		"relative":       {id, "x.tar", errdefs.ErrInvalid},
		"empty":          {id, "", errdefs.ErrInvalid},
		"dot dot":        {id, dir + "/../x.tar", errdefs.ErrInvalid},
		"existing dir":   {id, dir, errdefs.ErrInvalid},
		"missing parent": {id, filepath.Join(dir, "no", "x.tar"), errdefs.ErrInvalid},
	} {
		if err := e.m.Checkpoint(ctx, tc.id, tc.loc, 0); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
	// A tty container: its restore would have no terminal.
	e.m.ctrs[id].rec.Config.Tty = true
	if err := e.m.Checkpoint(ctx, id, filepath.Join(dir, "x.tar"), 0); !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), "tty") {
		t.Errorf("tty container: %v", err)
	}
	e.m.ctrs[id].rec.Config.Tty = false
	if len(e.rt.checkpoints) != 0 {
		t.Errorf("runtime ran on bad input: %+v", e.rt.checkpoints)
	}

	// CRIU fails: its log is in the error, nothing is left behind.
	e.rt.checkpointErr = errors.New("runc checkpoint: criu failed: type NOTIFY errno 0")
	loc := filepath.Join(dir, "fail.tar")
	err := e.m.Checkpoint(ctx, id, loc, 0)
	if err == nil || !strings.Contains(err.Error(), "criu failed") {
		t.Fatalf("err = %v", err)
	}
	if _, serr := os.Stat(loc); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("archive written after a failure: %v", serr)
	}
	if ents, _ := filepath.Glob(filepath.Join(e.opts.StateDir, id, "checkpoint-*")); len(ents) != 0 {
		t.Errorf("leftovers: %v", ents)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("leftovers in the location's directory: %v", ents)
	}

	// A runtime without CRIU, no criu binary.
	e.rt.checkpointErr = nil
	criuBinary = "podunit-no-such-criu"
	if err := e.m.Checkpoint(ctx, id, loc, 0); !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), "criu is not installed") {
		t.Errorf("no criu: %v", err)
	}
}

func TestRestoreFromBadArchive(t *testing.T) {
	e := checkpointEnv(t)
	dir := t.TempDir()
	notTar := filepath.Join(dir, "plain")
	if err := os.WriteFile(notTar, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, img := range map[string]string{
		"missing": filepath.Join(dir, "nosuch.tar"),
		"dir":     dir,
		"not tar": notTar,
		"unclean": dir + "/../plain",
	} {
		cfg := containerConfig("r")
		cfg.Image.Image = img
		if _, err := e.m.Create(context.Background(), "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: err = %v, want InvalidArgument", name, err)
		}
	}
	e.assertClean()
}

func TestCRIULogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dump.log")
	if err := os.WriteFile(p, []byte("(0.1) ok\n(0.2) Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds\n(0.3) bye\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := oci.CRIULogTail(p, 5); got != "(0.2) Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds" {
		t.Errorf("tail = %q", got)
	}
}

// What a restore request says about the process must match the
// checkpoint; its restore-time settings replace the checkpointed ones.
func TestRestoreTimeSettings(t *testing.T) {
	e := checkpointEnv(t)
	id := e.running("counter")
	loc := filepath.Join(t.TempDir(), "ck.tar")
	if err := e.m.Checkpoint(context.Background(), id, loc, 0); err != nil {
		t.Fatal(err)
	}
	cfg := containerConfig("other-command")
	cfg.Image.Image = loc
	cfg.Command = []string{"sh"}
	if _, err := e.m.Create(context.Background(), "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "command") {
		t.Errorf("other command: %v", err)
	}
	// The same command, other resources: created with the request's.
	cfg = containerConfig("same-command")
	cfg.Image.Image = loc
	cfg.Linux.Resources.MemoryLimitInBytes = 128 << 20
	rid, err := e.m.Create(context.Background(), "pod1", cfg, sandboxConfig("pod1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.m.ctrs[rid].rec.Config.GetLinux().GetResources().GetMemoryLimitInBytes(); got != 128<<20 {
		t.Errorf("restored memory limit %d", got)
	}
	for _, id := range []string{id, rid} {
		if err := e.m.Remove(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}

	// A runtime that cannot restore is refused at create.
	e.deps.Features = map[string]oci.Features{"runc": {}}
	e.m = e.newManager()
	cfg = containerConfig("no-criu")
	cfg.Image.Image = loc
	if _, err := e.m.Create(context.Background(), "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Errorf("runtime without CRIU: %v", err)
	}
	e.assertClean()
}

func TestRestoreTimeSettingsRules(t *testing.T) {
	ckpt := func() *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{
			Command: []string{"sh"}, Args: []string{"-c", "x"}, WorkingDir: "/w",
			Envs:   []*runtimeapi.KeyValue{{Key: "A", Value: []byte("1")}, {Key: "B", Value: []byte("2")}},
			Mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/var/lib/kubelet/pods/old/volumes/data"}},
		}
	}
	newMounts := []*runtimeapi.Mount{{ContainerPath: "/data/", HostPath: "/var/lib/kubelet/pods/new/volumes/data"}}
	for name, tc := range map[string]struct {
		req *runtimeapi.ContainerConfig
		ok  bool
	}{
		"nothing said":         {&runtimeapi.ContainerConfig{}, true},
		"same process":         {ckpt(), true},
		"env in another order": {&runtimeapi.ContainerConfig{Envs: []*runtimeapi.KeyValue{{Key: "B", Value: []byte("2")}, {Key: "A", Value: []byte("1")}}}, true},
		"new volume paths":     {&runtimeapi.ContainerConfig{Mounts: newMounts}, true},
		"other args":           {&runtimeapi.ContainerConfig{Args: []string{"-c", "y"}}, false},
		"other workdir":        {&runtimeapi.ContainerConfig{WorkingDir: "/"}, false},
		"other env":            {&runtimeapi.ContainerConfig{Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte("9")}}}, false},
		"other mount":          {&runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{ContainerPath: "/other"}}}, false},
		"one mount more":       {&runtimeapi.ContainerConfig{Mounts: append(slices.Clone(newMounts), &runtimeapi.Mount{ContainerPath: "/x"})}, false},
	} {
		cfg := ckpt()
		err := restoreTimeSettings(cfg, tc.req)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", name, err, tc.ok)
		}
		if name == "new volume paths" && cfg.Mounts[0].HostPath != newMounts[0].HostPath {
			t.Errorf("mounts not taken from the request: %v", cfg.Mounts)
		}
	}
}
