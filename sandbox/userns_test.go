package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.podman.io/storage/pkg/reexec"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/netns"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/systemd/systemdtest"
)

// TestMain serves netns.NewInUser's holder, which is this binary
// re-executed.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

func usernsPod(name string, pid runtimeapi.NamespaceMode) *runtimeapi.PodSandboxConfig {
	c := podConfig(name)
	m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 100000, Length: 65536}}
	c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{
		Pid:           pid,
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m},
	}
	return c
}

// nsOwner is the inode of the user namespace owning the namespace file p.
func nsOwner(t *testing.T, p string) uint64 {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ufd, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ufd)
	var st unix.Stat_t
	if err := unix.Fstat(ufd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestUserNamespacePod: the pod's user namespace is pinned with its
// mappings, owns the pod's other namespaces (the shared PID namespace
// too: its init enters the user namespace first), and nothing of it is
// left after Remove.
func TestUserNamespacePod(t *testing.T) {
	e := newEnv(t)
	var procs sync.Map
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
		if !strings.HasSuffix(u.Name, "-init.service") {
			return systemd.JobDone
		}
		id := strings.TrimSuffix(strings.TrimPrefix(u.Name, "podunit-pod-"), "-init.service")
		argv := initCommand(DefaultPodInit, e.m.pinPath("user", id))
		cmd := exec.Command(argv[0], argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Errorf("start init %v: %v", argv, err)
			return systemd.JobFailed
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		procs.Store(u.Name, initProc{cmd.Process, done})
		u.Props["MainPID"] = uint32(cmd.Process.Pid)
		return systemd.JobDone
	}
	e.sd.StopFunc = func(u *systemdtest.Unit) systemd.JobResult {
		if p, ok := procs.Load(u.Name); ok {
			ip := p.(initProc)
			ip.p.Kill()
			<-ip.done
		}
		return systemd.JobDone
	}
	ctx := context.Background()
	id, err := e.m.Run(ctx, usernsPod("u", runtimeapi.NamespaceMode_POD), "crun")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := e.m.Get(ctx, id)
	if sb.UserNSPath != e.m.pinPath("user", id) || !netns.IsPinned(sb.UserNSPath) {
		t.Fatalf("user namespace pin %q", sb.UserNSPath)
	}
	user, _ := netns.Inode(sb.UserNSPath)
	for _, p := range []string{sb.NetNSPath, sb.IPCNSPath, sb.UTSNSPath, sb.PIDNSPath} {
		if got := nsOwner(t, p); got != user {
			t.Errorf("%s is owned by user namespace %d, not the pod's %d", p, got, user)
		}
	}
	// The pod's namespaces are configured from outside as for any pod,
	// IPC sysctls included (which only the namespace's root may write).
	for file, want := range map[string]string{
		"/proc/sys/kernel/hostname":                     "u",
		"/proc/sys/kernel/shm_rmid_forced":              "1",
		"/proc/sys/net/ipv4/ip_unprivileged_port_start": "77",
	} {
		if got := readInNS(t, e.m.nsPins(sb), file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	out, err := exec.Command("nsenter", "--user="+sb.UserNSPath, "--", "cat", "/proc/self/uid_map", "/proc/self/gid_map").CombinedOutput()
	if err != nil || strings.Join(strings.Fields(string(out)), " ") != "0 100000 65536 0 100000 65536" {
		t.Errorf("maps %q %v", out, err)
	}
	if err := e.m.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNoTraces(t, e, id)
	if _, err := os.Lstat(e.m.pinPath("user", id)); !os.IsNotExist(err) {
		t.Errorf("user namespace pin left (%v)", err)
	}
}

func TestUserNamespaceInvalid(t *testing.T) {
	e := newEnv(t)
	m := func(c, h, l uint32) []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{ContainerId: c, HostId: h, Length: l}}
	}
	cases := map[string]func(o *runtimeapi.NamespaceOption){
		"host network": func(o *runtimeapi.NamespaceOption) { o.Network = runtimeapi.NamespaceMode_NODE },
		"host ipc":     func(o *runtimeapi.NamespaceOption) { o.Ipc = runtimeapi.NamespaceMode_NODE },
		"host pid":     func(o *runtimeapi.NamespaceOption) { o.Pid = runtimeapi.NamespaceMode_NODE },
		"two uid maps": func(o *runtimeapi.NamespaceOption) {
			o.UsernsOptions.Uids = append(m(0, 1000, 10), m(10, 5000, 10)...)
		},
		"0 unmapped":  func(o *runtimeapi.NamespaceOption) { o.UsernsOptions.Gids = m(1, 1000, 10) },
		"empty":       func(o *runtimeapi.NamespaceOption) { o.UsernsOptions.Uids = m(0, 1000, 0) },
		"past 2^32-1": func(o *runtimeapi.NamespaceOption) { o.UsernsOptions.Uids = m(0, 4294967000, 65536) },
		"container": func(o *runtimeapi.NamespaceOption) {
			o.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}
		},
		"target": func(o *runtimeapi.NamespaceOption) {
			o.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}
		},
		"node with maps": func(o *runtimeapi.NamespaceOption) {
			o.UsernsOptions.Mode = runtimeapi.NamespaceMode_NODE
		},
	}
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		c := usernsPod(fmt.Sprintf("bad-%d", len(name)), runtimeapi.NamespaceMode_CONTAINER)
		cases[name](c.Linux.SecurityContext.NamespaceOptions)
		if _, err := e.m.Run(context.Background(), c, ""); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if len(e.sd.Calls) != 0 || e.net.count("") != 0 {
		t.Fatalf("invalid requests reached systemd or CNI: %v %v", e.sd.Calls, e.net.calls)
	}
	if ents, _ := os.ReadDir(e.opts.RunDir); len(ents) != 0 {
		t.Fatalf("invalid requests created %v", ents)
	}
}
