package container

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/streaming"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/systemd/systemdtest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var ctx = context.Background()

func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	st := e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.CreatedAt == 0 || st.StartedAt != 0 {
		t.Fatalf("after create: %v", st)
	}
	if st.LogPath != filepath.Join(e.logDir, "app/1.log") || st.ImageRef != "docker.io/library/busybox@sha256:bbbb" || st.ImageId != "aaaa" {
		t.Errorf("status fields: log %q ref %q id %q", st.LogPath, st.ImageRef, st.ImageId)
	}
	if st.User.GetLinux().GetUid() != 0 {
		t.Errorf("user %v", st.User)
	}
	spec, err := os.ReadFile(filepath.Join(e.opts.RunDir, id, "bundle", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	wantCg := "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/podunit-ctr-" + id + ".service/container"
	if !strings.Contains(string(spec), `"cgroupsPath":"`+wantCg+`"`) {
		t.Errorf("spec cgroupsPath not inside the unit (want %s)", wantCg)
	}

	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx, id); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Errorf("second start: %v", err)
	}
	u := e.sd.Units[unitName(id)]
	if u == nil {
		t.Fatal("no unit")
	}
	for k, want := range map[string]any{
		"Slice": "kubepods-besteffort-pod1.slice", "Type": "forking", "Delegate": true,
		"Description": "default/web-pod1/app", "MemoryMax": uint64(64 << 20), "CPUShares": uint64(512),
		"KillSignal": int32(3), "NotifyAccess": "exec", "GuessMainPID": false, "CollectMode": "inactive-or-failed",
	} {
		if u.Props[k] != want {
			t.Errorf("unit %s = %v (%T), want %v", k, u.Props[k], u.Props[k], want)
		}
	}
	fields := u.Props["LogExtraFields"].([][]byte)
	if len(fields) != 7 || string(fields[0]) != "PODUNIT_LOG=1" || string(fields[5]) != "CONTAINER_ID="+id || string(fields[6]) != "CONTAINER_ATTEMPT=1" {
		t.Errorf("log fields %q", fields)
	}
	st = e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt < st.CreatedAt {
		t.Fatalf("after start: %v", st)
	}

	if err := e.m.Stop(ctx, id, 10); err != nil {
		t.Fatal(err)
	}
	if got := e.sd.Calls; !contains(got, "stop "+unitName(id)) {
		t.Errorf("calls %q", got)
	}
	st = e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 143 || st.Reason != ReasonError || st.FinishedAt < st.StartedAt {
		t.Fatalf("after stop: %v", st)
	}
	if got := e.logs.calls(); got != "flush "+id {
		t.Errorf("log writer calls %q", got)
	}
	if err := e.m.Stop(ctx, id, 10); err != nil {
		t.Errorf("stop of exited container: %v", err)
	}

	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Errorf("second remove: %v", err)
	}
	if _, _, err := e.m.Status(ctx, id, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("status after remove: %v", err)
	}
	e.assertClean()
}

func (e *env) assertClean() {
	e.t.Helper()
	e.drain()
	for _, d := range []string{e.opts.StateDir, e.opts.RunDir, e.imgs.dir} {
		if ents := entries(d); len(ents) != 0 {
			e.t.Errorf("%s not empty: %v", d, ents)
		}
	}
	if len(e.sd.Units) != 0 || len(e.imgs.rootfs) != 0 || len(e.imgs.created) != 0 {
		e.t.Errorf("leaks: units %v mounts %v rootfs %v", e.sd.Units, e.imgs.rootfs, e.imgs.created)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestCreateValidation(t *testing.T) {
	e := newEnv(t)
	bad := map[string]func(c *runtimeapi.ContainerConfig){
		"no metadata":     func(c *runtimeapi.ContainerConfig) { c.Metadata = nil },
		"no image":        func(c *runtimeapi.ContainerConfig) { c.Image = nil },
		"log path escape": func(c *runtimeapi.ContainerConfig) { c.LogPath = "../../etc/passwd" },
		"log path abs":    func(c *runtimeapi.ContainerConfig) { c.LogPath = "/etc/passwd" },
		"mount dotdot": func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/a/../../b", HostPath: "/tmp"}}
		},
		// Refused before the image volume is mounted.
		"image volume with unknown mount option": func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/v", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}, MountOptions: []string{"suid"}}}
		},
	}
	for name, mut := range bad {
		cfg := containerConfig("x")
		mut(cfg)
		if _, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	cfg := containerConfig("x")
	cfg.Image.Image = "missing"
	if _, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing image: %v", err)
	}
	if _, err := e.m.Create(ctx, "nopod", containerConfig("x"), nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing pod: %v", err)
	}
	e.assertClean()
	// The failed creates released the name.
	e.create("pod1", "x")
}

func TestImageVolume(t *testing.T) {
	e := newEnv(t)
	cfg := containerConfig("iv")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/mnt/img", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}}}
	id, err := e.m.Create(ctx, "pod1", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mounts[0].HostPath != "" {
		t.Error("the caller's config was modified")
	}
	st := e.status(id)
	mnt := st.Mounts[0]
	if mnt.GetImage().GetImageRef() != "aaaa" || !mnt.Readonly || mnt.HostPath != filepath.Join(e.imgs.dir, "volumes", id, "aaaa") {
		t.Errorf("status mount %v", mnt)
	}
	spec, _ := os.ReadFile(filepath.Join(e.opts.RunDir, id, "bundle", "config.json"))
	if !strings.Contains(string(spec), `"destination":"/mnt/img"`) {
		t.Errorf("image volume not in the spec")
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.drain() // deleting them is deferred
	if len(e.imgs.volumes) != 0 {
		t.Errorf("image volumes left: %v", e.imgs.volumes)
	}
	for name, mut := range map[string]func(m *runtimeapi.Mount){
		"host_path and image": func(m *runtimeapi.Mount) { m.HostPath = "/tmp" },
		"writable":            func(m *runtimeapi.Mount) { m.Readonly = false },
		"missing sub path":    func(m *runtimeapi.Mount) { m.ImageSubPath = "nope" },
		"sub path escapes":    func(m *runtimeapi.Mount) { m.ImageSubPath = "../x" },
	} {
		c := containerConfig("bad")
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/mnt/img", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}}}
		mut(c.Mounts[0])
		if _, err := e.m.Create(ctx, "pod1", c, nil); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// a sub path that exists in the image
	os.MkdirAll(filepath.Join(e.imgs.dir, "volumes", "x"), 0o755)
	c := containerConfig("sub")
	c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/mnt/img", Readonly: true, ImageSubPath: "etc", Image: &runtimeapi.ImageSpec{Image: "busybox"}}}
	e.imgs.volumeDirs = true
	id, err = e.m.Create(ctx, "pod1", c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if hp := e.status(id).Mounts[0].HostPath; hp != filepath.Join(e.imgs.dir, "volumes", id, "aaaa", "etc") {
		t.Errorf("sub path host path %s", hp)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(e.imgs.dir, "volumes"))
	e.assertClean()
}

func TestCreateRollsBackOnSpecError(t *testing.T) {
	e := newEnv(t)
	cfg := containerConfig("x")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "nosuchuser"}
	if _, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1")); err == nil {
		t.Fatal("unknown user accepted")
	}
	e.assertClean()
}

func TestNameReservation(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	if _, err := e.m.Create(ctx, "pod1", containerConfig("app"), sandboxConfig("pod1")); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("duplicate name: %v", err)
	}
	e.create("pod2", "app") // other pod: fine
	cfg := containerConfig("app")
	cfg.Metadata.Attempt = 2
	if _, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1")); err != nil {
		t.Errorf("next attempt: %v", err)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.create("pod1", "app")
}

func TestStartFailureReportsRuntimeMessage(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
		// What runc leaves when the entrypoint does not exist; systemd
		// then runs ExecStopPost and collects the failed unit.
		os.WriteFile(filepath.Join(e.opts.RunDir, id, "runtime.log"),
			[]byte(`{"level":"error","msg":"runc run failed: unable to start container process: exec: \"nope\": executable file not found in $PATH","time":"x"}`+"\n"), 0o600)
		e.writeExit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1"})
		delete(e.sd.Units, u.Name) // collected (CollectMode=inactive-or-failed)
		return systemd.JobFailed
	}
	err := e.m.Start(ctx, id)
	if err == nil || !strings.Contains(err.Error(), `exec: "nope": executable file not found`) {
		t.Fatalf("start error %v", err)
	}
	if _, ok := e.sd.Units[unitName(id)]; ok {
		t.Error("failed unit not collected")
	}
	st := e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Reason != ReasonStartError || st.ExitCode != 128 || !strings.Contains(st.Message, "nope") {
		t.Errorf("status %v", st)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.assertClean()
}

// The init exited (status 3) before the wrapper that started it: systemd fails the
// start job, but the container did start.
func TestStartJobFailedButContainerRan(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "quick")
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
		e.writeExit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "3", FinishedAt: 77})
		delete(e.sd.Units, u.Name)
		return systemd.JobFailed
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	st := e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 || st.Reason != ReasonError || st.FinishedAt != 77 {
		t.Errorf("status %v", st)
	}
}

// A container created before a reboot lost its writable layer with the
// transient store (image.storage_transient): it stays listed, a start
// answers FailedPrecondition (not NotFound: it exists) and changes
// nothing, and it is removed cleanly.
func TestStartAfterRebootClearedRootfs(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	// The reboot: /run emptied, storage's transient records gone.
	e.imgs.mu.Lock()
	delete(e.imgs.rootfs, id)
	delete(e.imgs.created, id)
	_ = os.RemoveAll(filepath.Join(e.imgs.dir, id))
	e.imgs.mu.Unlock()
	if err := os.RemoveAll(e.opts.RunDir); err != nil {
		t.Fatal(err)
	}
	e.m = e.newManager()
	err := e.m.Start(ctx, id)
	if !errors.Is(err, errdefs.ErrPrecondition) || errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "root filesystem is gone") {
		t.Fatalf("start after the rootfs was cleared: %v; want FailedPrecondition", err)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("state after the refused start: %v", st.State)
	}
	if len(e.sd.Units) != 0 {
		t.Errorf("units started: %v", e.sd.Units)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.assertClean()
}

func TestExitReasons(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		rec    exitrec.Record
		code   int32
		reason string
	}{
		{exitrec.Record{ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}, 0, ReasonCompleted},
		{exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "7"}, 7, ReasonError},
		{exitrec.Record{ServiceResult: "signal", ExitCode: "killed", ExitStatus: "KILL", OOMKilled: true}, 137, ReasonOOMKilled},
	}
	for i, c := range cases {
		id := e.create("pod1", "c"+string(rune('a'+i)))
		if err := e.m.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		c.rec.FinishedAt = time.Now().UnixNano()
		e.exit(id, &c.rec)
		st := e.status(id)
		if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != c.code || st.Reason != c.reason || st.FinishedAt != c.rec.FinishedAt {
			t.Errorf("case %d: %v", i, st)
		}
	}
	// Unit gone, no record (recorder could not run): not reported as success.
	id := e.create("pod1", "lost")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	delete(e.sd.Units, unitName(id))
	if st := e.status(id); st.ExitCode != 255 || st.Reason != ReasonUnknown {
		t.Errorf("lost exit: %v", st)
	}
}

func TestRecover(t *testing.T) {
	e := newEnv(t)
	running := e.create("pod1", "running")
	exited := e.create("pod1", "exited")
	created := e.create("pod1", "created")
	for _, id := range []string{running, exited} {
		if err := e.m.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// podunit goes down; one container exits meanwhile, a stray unit and
	// a half-created container directory appear.
	e.exit(exited, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "3", FinishedAt: 42})
	e.sd.Units[unitName("stray")] = &systemdtest.Unit{Name: unitName("stray"), ActiveState: "active", Props: map[string]any{}}
	os.MkdirAll(filepath.Join(e.opts.StateDir, "halfway"), 0o700)
	callsBefore := len(e.sd.Calls)

	m2 := e.newManager()
	e.m = m2
	for _, c := range e.sd.Calls[callsBefore:] {
		if strings.HasPrefix(c, "start ") || c == "stop "+unitName(running) {
			t.Errorf("recover touched a running container: %s", c)
		}
	}
	if st := e.status(running); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("running: %v", st)
	}
	if st := e.status(exited); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 || st.FinishedAt != 42 {
		t.Errorf("exited while down: %v", st)
	}
	if st := e.status(created); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("created: %v", st)
	}
	if _, ok := e.sd.Units[unitName("stray")]; ok {
		t.Error("stray unit not stopped")
	}
	if _, err := os.Stat(filepath.Join(e.opts.StateDir, "halfway")); !os.IsNotExist(err) {
		t.Error("half-created container left")
	}
	if _, err := m2.Create(ctx, "pod1", containerConfig("running"), nil); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("name reservation lost on recover: %v", err)
	}
	if err := m2.StopPodContainers(ctx, "pod1"); err != nil {
		t.Fatal(err)
	}
	if st := e.status(running); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("after StopPodContainers: %v", st)
	}
	if err := m2.RemovePodContainers(ctx, "pod1"); err != nil {
		t.Fatal(err)
	}
	e.assertClean()
}

func TestUpdateResources(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{CpuQuota: 20000, CpuPeriod: 100000}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	u := e.sd.Units[unitName(id)]
	if u.Props["CPUQuotaPerSecUSec"] != uint64(200000) || u.Props["MemoryMax"] != uint64(64<<20) {
		t.Errorf("update before start not applied at start: %v", u.Props)
	}
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	if u.Props["MemoryMax"] != uint64(32<<20) {
		t.Errorf("MemoryMax not updated: %v", u.Props["MemoryMax"])
	}
	r := e.status(id).Resources.GetLinux()
	if r.MemoryLimitInBytes != 32<<20 || r.CpuShares != 512 || r.CpuQuota != 20000 {
		t.Errorf("status resources %v", r)
	}
	if err := e.m.UpdateResources(ctx, "nope", &runtimeapi.LinuxContainerResources{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
}

func TestExecSync(t *testing.T) {
	e := newEnv(t)
	e.opts.ExecOutputMax = 8
	e.m = e.newManager()
	id := e.create("pod1", "app")
	e.rt.exec = func(ctx context.Context, p oci.ExecProcess) (int, error) {
		if p.Process.Args[0] == "sleep" {
			<-ctx.Done()
			return -1, ctx.Err()
		}
		p.Stdout.Write([]byte("0123456789abcdef"))
		p.Stderr.Write([]byte("err"))
		return 3, nil
	}
	if _, _, _, err := e.m.ExecSync(ctx, id, []string{"true"}, 0); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Errorf("exec in created container: %v", err)
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	out, errOut, code, err := e.m.ExecSync(ctx, id, []string{"echo"}, 5)
	if err != nil || string(out) != "01234567" || string(errOut) != "err" || code != 3 {
		t.Errorf("exec: %q %q %d %v", out, errOut, code, err)
	}
	start := time.Now()
	if _, _, _, err := e.m.ExecSync(ctx, id, []string{"sleep", "100"}, 1); !errors.Is(err, errdefs.ErrDeadline) {
		t.Errorf("timeout: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timeout took %v", d)
	}

	// A streamed exec with a terminal reaches the runtime's one Exec as
	// the container's process on a terminal, with the client's resizes.
	resize := make(chan console.WinSize)
	e.rt.exec = func(ctx context.Context, p oci.ExecProcess) (int, error) {
		if !p.Process.Terminal || p.Process.Args[0] != "sh" || p.Resize != (<-chan console.WinSize)(resize) {
			t.Errorf("terminal exec: %+v", p)
		}
		return 0, nil
	}
	if code, err := e.m.Exec(ctx, id, streaming.ExecProcess{Args: []string{"sh"}, TTY: true, Resize: resize}); err != nil || code != 0 {
		t.Errorf("terminal exec: %d %v", code, err)
	}
}

func TestListFilters(t *testing.T) {
	e := newEnv(t)
	a := e.create("pod1", "a")
	b := e.create("pod2", "b")
	if err := e.m.Start(ctx, b); err != nil {
		t.Fatal(err)
	}
	list := func(f *runtimeapi.ContainerFilter) []string {
		cs, err := e.m.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range cs {
			ids = append(ids, c.Id)
		}
		return ids
	}
	check := func(name string, got []string, want ...string) {
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	check("all", list(nil), a, b)
	check("pod", list(&runtimeapi.ContainerFilter{PodSandboxId: "pod2"}), b)
	check("id prefix", list(&runtimeapi.ContainerFilter{Id: a[:12]}), a)
	check("state", list(&runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}), b)
	check("labels", list(&runtimeapi.ContainerFilter{LabelSelector: map[string]string{"app": "a"}}), a)
	e.exit(b, &exitrec.Record{ExitCode: "exited", ExitStatus: "0"})
	check("exited via list", list(&runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}}), b)
	if st, _, err := e.m.Status(ctx, a[:10], true); err != nil || st.Id != a {
		t.Errorf("status by prefix: %v %v", st, err)
	}
	// Unit events name containers by their units: never by prefix.
	if _, err := e.m.UnitStopped(ctx, a[:10], systemd.UnitState{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unit event by prefix: %v", err)
	}
}

func TestVerboseStatus(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	_, info, err := e.m.Status(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info["info"], `"unit":"podunit-ctr-`+id+`.service"`) || !strings.Contains(info["info"], `"runtimeSpec":{`) {
		t.Errorf("info %s", info["info"])
	}
}

func TestStopSignal(t *testing.T) {
	for _, c := range []struct {
		cri   runtimeapi.Signal
		image string
		want  int
		ok    bool
	}{
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "", 15, true},
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "SIGQUIT", 3, true},
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "int", 2, true},
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "9", 9, true},
		{runtimeapi.Signal_SIGNAL_SIGUSR1, "SIGQUIT", 10, true},
		{runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3, "", 37, true},
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "RTMAX-2", 62, true},
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "SIGNOPE", 0, false},
	} {
		got, err := stopSignal(c.cri, c.image)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("stopSignal(%v, %q) = %d, %v", c.cri, c.image, got, err)
		}
	}
}

func TestLastRuntimeError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte(`{"level":"warning","msg":"w"}`+"\n"+`{"level":"error","msg":"boom"}`+"\n"+`{"level":"info","msg":"i"}`+"\n"), 0o600)
	if got := lastRuntimeError(p); got != "boom" {
		t.Errorf("got %q", got)
	}
	os.WriteFile(p, []byte("plain failure\n\n"), 0o600)
	if got := lastRuntimeError(p); got != "plain failure" {
		t.Errorf("got %q", got)
	}
}

func TestParseSystemdVersion(t *testing.T) {
	for in, want := range map[string]int{
		"systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT": 252,
		"systemd 256.7 (256.7-1)":                     252, // not an integer: fallback
		"garbage":                                     252,
		"systemd 249\n":                               249,
	} {
		if got := parseSystemdVersion(in); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}

func TestRuntimesFromConfig(t *testing.T) {
	rts, err := RuntimesFromConfig(map[string]config.Handler{
		"runc": {Type: "runc", Path: "/usr/sbin/runc", Root: "/run/x/runc"},
		"fast": {Type: "crun", Path: "/usr/bin/crun", Root: "/run/x/crun"},
	}, "/run/x", "/usr/bin/podunit")
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(rts["fast"].CreateArgv("id", "/b", "/p", "/l", ""), " ")
	if argv != "/usr/bin/crun --log=/l --log-format=json --root /run/x/crun --cgroup-manager=disabled create --pid-file /p --bundle /b id" {
		t.Errorf("crun create argv %q", argv)
	}
	if start := strings.Join(rts["runc"].StartArgv("id", "/l"), " "); start != "/usr/sbin/runc --log=/l --log-format=json --root /run/x/runc start id" {
		t.Errorf("runc start argv %q", start)
	}
	if del := strings.Join(rts["runc"].DeleteArgv("id"), " "); del != "/usr/sbin/runc --root /run/x/runc delete --force id" {
		t.Errorf("runc delete argv %q", del)
	}
	if _, err := RuntimesFromConfig(map[string]config.Handler{"x": {Type: "kata", Path: "/k", Root: "/r"}}, "/run/x", "/usr/bin/podunit"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestDetectHugetlb(t *testing.T) {
	hybrid := "35 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
		"36 25 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n" +
		"37 25 0:32 / /sys/fs/cgroup/hugetlb ro - tmpfs tmpfs ro\n"
	if DetectHugetlb(t.TempDir(), hybrid) {
		t.Error("hybrid without a v1 hugetlb hierarchy: usable")
	}
	if !DetectHugetlb(t.TempDir(), hybrid+"38 25 0:33 / /sys/fs/cgroup/hugetlb rw - cgroup cgroup rw,hugetlb\n") {
		t.Error("v1 hugetlb hierarchy not found")
	}
	v2 := t.TempDir()
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
	if DetectHugetlb(v2, "") {
		t.Error("v2 without hugetlb: usable")
	}
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpuset cpu io memory hugetlb pids\n"), 0o644)
	if !DetectHugetlb(v2, "") {
		t.Error("v2 with hugetlb: not usable")
	}
}

func TestHugepageLimitsDropped(t *testing.T) {
	for _, drop := range []bool{false, true} {
		e := newEnv(t)
		e.opts.NoHugetlb = drop
		e.m = e.newManager()
		cfg := containerConfig("huge")
		cfg.Linux.Resources.HugepageLimits = []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}}
		id, err := e.m.Create(ctx, "pod1", cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := os.ReadFile(filepath.Join(e.opts.RunDir, id, "bundle", "config.json"))
		if strings.Contains(string(spec), "hugepageLimits") == drop {
			t.Errorf("NoHugetlb=%v: spec %s", drop, spec)
		}
	}
}

// The CPU quota and the memory limit reach the unit only after its start
// job (the runtime put them on the container's own cgroup at create): what
// runs in the unit before the container's init (wrapper, runtime create and
// start) must not be throttled or OOM-killed in the container's place.
func TestStartSetsCPUQuotaAfterStartJob(t *testing.T) {
	e := newEnv(t)
	id := e.createWithQuota(t, "pod1", "app")
	var atStart map[string]any
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
		atStart = maps.Clone(u.Props)
		return systemd.JobDone
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, ok := atStart["CPUQuotaPerSecUSec"]; ok {
		t.Errorf("the start job already had CPUQuotaPerSecUSec: %v", atStart)
	}
	if _, ok := atStart["MemoryMax"]; ok {
		t.Errorf("the start job already had MemoryMax: %v", atStart)
	}
	u := e.sd.Units[unitName(id)]
	if u.Props["CPUQuotaPerSecUSec"] != uint64(100000) || u.Props["CPUQuotaPeriodUSec"] != uint64(100000) || u.Props["MemoryMax"] != uint64(64<<20) {
		t.Errorf("quota after start: %v", u.Props)
	}
}

// A quota systemd refuses after the start fails the start and leaves no
// unit: the container must not run unlimited.
func TestStartFailsWhenCPUQuotaCannotBeSet(t *testing.T) {
	e := newEnv(t)
	e.deps.Systemd = refuseSetProperties{e.sd}
	e.m = e.newManager()
	id := e.createWithQuota(t, "pod1", "app")
	if err := e.m.Start(ctx, id); err == nil {
		t.Fatal("start succeeded without its CPU quota")
	}
	if _, ok := e.sd.Units[unitName(id)]; ok {
		t.Errorf("unit left after the failed start")
	}
	// the discarded container's init is SIGKILLed before the stop job: an
	// init that is PID 1 of its namespace ignores SIGTERM, and the stop
	// would wait out TimeoutStopUSec
	calls := strings.Join(e.sd.Calls, "\n")
	kill, stop := strings.Index(calls, "kill "+unitName(id)+" 9"), strings.Index(calls, "stop "+unitName(id))
	if kill < 0 || stop < 0 || kill > stop {
		t.Errorf("want SIGKILL before the stop job, calls:\n%s", calls)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Reason != ReasonStartError {
		t.Errorf("status after the failed start: %v %q", st.State, st.Reason)
	}
}

// refuseSetProperties is a systemd whose SetUnitProperties always fails.
type refuseSetProperties struct{ *systemdtest.Fake }

func (refuseSetProperties) SetUnitProperties(context.Context, string, ...systemd.Property) error {
	return fmt.Errorf("fake: set-property refused: %w", errdefs.ErrInvalid)
}

// podunit killed between the start job and the limits set after it: the
// next podunit finds the container running without them and sets them.
func TestRecoverSetsLimitsAStartLeftUnset(t *testing.T) {
	e := newEnv(t)
	id := e.createWithQuota(t, "pod1", "app")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	u := e.sd.Units[unitName(id)]
	delete(u.Props, "CPUQuotaPerSecUSec")
	delete(u.Props, "MemoryMax")

	e.m = e.newManager()
	if u.Props["CPUQuotaPerSecUSec"] != uint64(100000) || u.Props["MemoryMax"] != uint64(64<<20) {
		t.Errorf("limits after recover: %v", u.Props)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after recover: %v", st)
	}
}

// A unit that has its limits is only read on recovery.
func TestRecoverLeavesLimitsThatAreSet(t *testing.T) {
	e := newEnv(t)
	id := e.createWithQuota(t, "pod1", "app")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	before := len(e.sd.Calls)
	e.m = e.newManager()
	for _, c := range e.sd.Calls[before:] {
		if strings.HasPrefix(c, "set-property ") {
			t.Errorf("recover set properties of a unit that had them: %s", c)
		}
	}
}

// createWithQuota creates a container and gives it a 100m CPU quota, one of
// the limits a runc start sets only after the start job.
func (e *env) createWithQuota(t *testing.T, pod, name string) string {
	t.Helper()
	id := e.create(pod, name)
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{CpuQuota: 10000, CpuPeriod: 100000}); err != nil {
		t.Fatal(err)
	}
	return id
}

// A reload may add, change and drop runtime handlers, but not one that a
// container still uses; the default handler follows the reload.
func TestSetRuntimes(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	other := &fakeRuntime{}
	if err := e.m.SetRuntimes(ctx, "crun", map[string]oci.Runtime{"crun": other}); !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(fmt.Sprint(err), id) {
		t.Fatalf("dropping the handler of %s: %v, want ErrPrecondition naming it", id, err)
	}
	if rt, err := e.m.runtime(""); err != nil || rt != e.rt {
		t.Fatalf("after a refused change the default runtime is %v, %v", rt, err)
	}
	if err := e.m.SetRuntimes(ctx, "kata", map[string]oci.Runtime{"runc": e.rt}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("default handler without a runtime: %v, want ErrInvalid", err)
	}
	if err := e.m.SetRuntimes(ctx, "crun", map[string]oci.Runtime{"runc": e.rt, "crun": other}); err != nil {
		t.Fatal(err)
	}
	if rt, err := e.m.runtime(""); err != nil || rt != other {
		t.Fatalf("default runtime after the reload: %v, %v; want the crun one", rt, err)
	}
	// the container keeps the handler it was created with
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := e.m.runtimes(); len(got) != 2 {
		t.Fatalf("runtimes() = %d, want 2", len(got))
	}
}

// fakeRuntimeBinary is a runc whose `features` prints the document in
// ../oci/testdata/features/name, or, with name empty, fails as a runc
// without that command does.
func fakeRuntimeBinary(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	answer := `echo "unknown command features" >&2; exit 1`
	if name != "" {
		abs, err := filepath.Abs(filepath.Join("..", "oci", "testdata", "features", name))
		if err != nil {
			t.Fatal(err)
		}
		answer = "cat " + abs
	}
	script := "#!/bin/sh\nfor a; do last=$a; done\ncase \"$last\" in\nfeatures) " + answer + " ;;\n*) exit 2 ;;\nesac\n"
	bin := filepath.Join(dir, "runc")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// A reload that adds a handler probes it like the start does, so its
// features appear with it; an unchanged handler keeps what it was probed
// with, a changed one is asked again, and one that cannot answer is added
// with no features, as at start.
func TestSetRuntimesProbesFeatures(t *testing.T) {
	e := newEnv(t)
	e.rt.features = oci.Features{Source: "reprobed"}
	e.deps.Features = map[string]oci.Features{"runc": {Source: "runc features", Version: "at start"}}
	e.m = e.newManager()
	dir := t.TempDir()
	added := oci.NewRunc(oci.CLIConfig{Name: "runc-new", Binary: fakeRuntimeBinary(t, "runc-1.1.5.json"), Root: dir, ExecDir: dir})
	broken := oci.NewRunc(oci.CLIConfig{Name: "broken", Binary: fakeRuntimeBinary(t, ""), Root: dir, ExecDir: dir})
	if _, f := e.m.HandlerFeatures(); len(f) != 1 {
		t.Fatalf("before the reload: %v", f)
	}
	if err := e.m.SetRuntimes(ctx, "runc", map[string]oci.Runtime{"runc": e.rt, "runc-new": added, "broken": broken}); err != nil {
		t.Fatal(err)
	}
	def, f := e.m.HandlerFeatures()
	if def != "runc" || len(f) != 3 {
		t.Fatalf("after the reload: %q %v", def, f)
	}
	if f["runc-new"].Source != "runc-new features" || !strings.HasPrefix(f["runc-new"].Version, "1.1.5") {
		t.Errorf("added handler: %+v", f["runc-new"])
	}
	if f["runc"].Version != "at start" {
		t.Errorf("unchanged handler was probed again: %+v", f["runc"])
	}
	if f["broken"].Source != "" || f["broken"].RecursiveReadOnly {
		t.Errorf("handler that cannot answer: %+v", f["broken"])
	}
	if _, got, err := e.m.runtimeFeatures("runc-new"); err != nil || !strings.HasPrefix(got.Version, "1.1.5") {
		t.Errorf("CreateContainer would see %+v, %v", got, err)
	}

	// The default handler's runtime changes: it is asked again.
	if err := e.m.SetRuntimes(ctx, "runc", map[string]oci.Runtime{"runc": &fakeRuntime{features: oci.Features{Source: "changed"}}}); err != nil {
		t.Fatal(err)
	}
	if _, f := e.m.HandlerFeatures(); len(f) != 1 || f["runc"].Source != "changed" {
		t.Errorf("after changing runc: %v", f)
	}
}

// slowStop is a systemd whose stop jobs wait for release: a container
// that ignores its stop signal, for as long as the test wants.
type slowStop struct {
	*systemdtest.Fake
	stopping chan struct{}
	release  chan struct{}
}

func (s slowStop) StopUnit(ctx context.Context, name string) error {
	s.stopping <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return fmt.Errorf("fake stop %s: %w", name, errdefs.ErrDeadline)
	}
	return s.Fake.StopUnit(ctx, name)
}

// A container working through its grace period blocks no status or list
// read: the kubelet's PLEG relist and housekeeping list every container
// each second (a 30 s stall there made node conformance's mirror pod
// spec miss its window).
func TestStopDoesNotBlockReads(t *testing.T) {
	e := newEnv(t)
	id := e.running("slow")
	other := e.running("other")
	sd := slowStop{Fake: e.sd, stopping: make(chan struct{}, 1), release: make(chan struct{})}
	e.deps.Systemd = sd
	e.m = e.newManager()
	stopped := make(chan error, 1)
	go func() { stopped <- e.m.Stop(ctx, id, 30) }()
	<-sd.stopping
	reads := make(chan error, 1)
	go func() {
		if l, err := e.m.List(ctx, nil); err != nil || len(l) != 2 {
			reads <- fmt.Errorf("list %v %v", l, err)
			return
		}
		for _, c := range []string{id, other} {
			st, _, err := e.m.Status(ctx, c, false)
			if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				reads <- fmt.Errorf("status of %s during the stop: %v %v", c, st, err)
				return
			}
		}
		reads <- nil
	}()
	select {
	case err := <-reads:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(sd.release)
		t.Fatal("status and list wait for a stop's grace period")
	}
	// a second stop waits for the first and finds it done
	second := make(chan error, 1)
	go func() { second <- e.m.Stop(ctx, id, 30) }()
	close(sd.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("after the stop: %v", st.State)
	}
}

// The image a status and a listing name is the pod spec's (the kubelet
// creates containers with the image ID it resolved and sends the spec's name
// as user_specified_image); without that name, asked by ID, the image's
// first tag; otherwise what was asked.
func TestStatusImageName(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tt := range []struct{ image, user, want string }{
		{"aaaa", "registry.example/busybox:1.37", "registry.example/busybox:1.37"},
		{"sha256:aaaa", "", "docker.io/library/busybox:latest"},
		{"aaaa", "", "docker.io/library/busybox:latest"},
		{"busybox", "", "busybox"},
	} {
		cfg := containerConfig("img-" + tt.user + tt.image)
		cfg.Metadata.Name = fmt.Sprintf("c%d", len(tt.image)+len(tt.user))
		cfg.Image = &runtimeapi.ImageSpec{Image: tt.image, UserSpecifiedImage: tt.user}
		id, err := e.m.Create(ctx, "pod1", cfg, sandboxConfig("pod1"))
		if err != nil {
			t.Fatal(err)
		}
		if got := e.status(id).GetImage(); got.GetImage() != tt.want || got.GetUserSpecifiedImage() != tt.user {
			t.Errorf("asked %q as %q: status image %q (user %q), want %q", tt.image, tt.user, got.GetImage(), got.GetUserSpecifiedImage(), tt.want)
		}
		l, err := e.m.List(ctx, &runtimeapi.ContainerFilter{Id: id})
		if err != nil || len(l) != 1 || l[0].GetImage().GetImage() != tt.want {
			t.Errorf("asked %q as %q: listed %v (%v), want image %q", tt.image, tt.user, l, err, tt.want)
		}
	}
}

// On cgroup v1 systemd may remove a pod slice's devices directory under
// runc's MkdirAll (a re-realization of the QoS slice): the start is tried
// once more, and the container runs.
func TestStartRetriesVanishedCgroup(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	attempts := 0
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
		attempts++
		if attempts > 1 {
			if _, err := os.Stat(filepath.Join(e.opts.RunDir, id, "runtime.log")); err == nil {
				t.Error("the first attempt's runtime log is still there")
			}
			return systemd.JobDone
		}
		os.WriteFile(filepath.Join(e.opts.RunDir, id, "runtime.log"),
			[]byte(`{"level":"error","msg":"runc create failed: unable to apply cgroup configuration: mkdir /sys/fs/cgroup/devices/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/podunit-ctr-x.service: no such file or directory","time":"x"}`+"\n"), 0o600)
		e.writeExit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1"})
		delete(e.sd.Units, u.Name)
		return systemd.JobFailed
	}
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	if attempts != 2 {
		t.Fatalf("%d start attempts, want 2", attempts)
	}
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("status %v", st)
	}
}

// Any other runtime failure, and the same one twice, is a start error
// after at most one more attempt.
func TestStartDoesNotRetryOtherFailures(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want int
	}{
		{`runc create failed: unable to start container process: exec: \"nope\": executable file not found in $PATH`, 1},
		{`runc create failed: unable to apply cgroup configuration: mkdir /sys/fs/cgroup/devices/x/y: no such file or directory`, 2},
	} {
		e := newEnv(t)
		id := e.create("pod1", "app")
		attempts := 0
		e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
			attempts++
			os.WriteFile(filepath.Join(e.opts.RunDir, id, "runtime.log"),
				[]byte(`{"level":"error","msg":"`+tc.msg+`","time":"x"}`+"\n"), 0o600)
			e.writeExit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1"})
			delete(e.sd.Units, u.Name)
			return systemd.JobFailed
		}
		if err := e.m.Start(ctx, id); err == nil {
			t.Fatalf("%s: start succeeded", tc.msg)
		}
		if attempts != tc.want {
			t.Errorf("%s: %d attempts, want %d", tc.msg, attempts, tc.want)
		}
		if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Reason != ReasonStartError {
			t.Errorf("status %v", st)
		}
		if err := e.m.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
		e.assertClean()
	}
}
