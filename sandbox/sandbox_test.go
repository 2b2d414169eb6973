package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/netns"
	"github.com/podunit/podunit/network"
	"github.com/podunit/podunit/podfiles"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/systemd/systemdtest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeNet struct {
	mu       sync.Mutex
	calls    []string
	setupErr error
	reqs     []*network.Request
	// inDel, if set, is sent to when a DEL starts, which then waits for
	// delDone: a slow CNI plugin.
	inDel, delDone chan struct{}
}

func (f *fakeNet) Setup(ctx context.Context, r *network.Request) (*network.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "add "+r.PodID)
	f.reqs = append(f.reqs, r)
	if f.setupErr != nil {
		return nil, f.setupErr
	}
	if !netns.IsPinned(r.NetNS) {
		return nil, errors.New("ADD without a pinned netns")
	}
	return &network.Result{Network: "fake", IPs: []string{"10.88.0.7", "fd00::7"}, Raw: []byte(`{"ips":[]}`)}, nil
}

func (f *fakeNet) Teardown(ctx context.Context, r *network.Request) error {
	if f.inDel != nil {
		f.inDel <- struct{}{}
		<-f.delDone
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "del "+r.PodID+" "+r.NetNS)
	return nil
}

func (f *fakeNet) Ready(ctx context.Context) error { return nil }

func (f *fakeNet) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

type env struct {
	m    *Manager
	sd   *systemdtest.Fake
	net  *fakeNet
	dir  string
	opts Options
}

// newEnv builds a Manager over fakes; mods adjust its Options first.
func newEnv(t *testing.T, mods ...func(*Options)) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("pod namespaces need root")
	}
	dir := t.TempDir()
	resolv := filepath.Join(dir, "host-resolv.conf")
	os.WriteFile(resolv, []byte("nameserver 192.0.2.53\n"), 0o644)
	e := &env{sd: systemdtest.New(), net: &fakeNet{}, dir: dir}
	os.MkdirAll(filepath.Join(dir, "cgroup"), 0o755)
	e.opts = Options{
		StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"),
		Network: e.net, Systemd: e.sd, Handlers: []string{"runc", "crun"},
		HostResolvConf: resolv,
		CgroupRoot:     filepath.Join(dir, "cgroup"),
		ParentSlice:    config.Default().Systemd.ParentSlice,
		OpTimeout:      config.Default().Systemd.CallTimeout.D(),
	}
	for _, mod := range mods {
		mod(&e.opts)
	}
	m, err := New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	t.Cleanup(func() { e.assertClean(t) })
	return e
}

// assertClean checks that nothing the tests created outlives them.
func (e *env) assertClean(t *testing.T) {
	t.Helper()
	for _, p := range e.m.List(context.Background()) {
		if err := e.m.Remove(context.Background(), p.ID); err != nil {
			t.Errorf("cleanup remove %s: %v", p.ID, err)
		}
	}
	if n := mountsUnder(t, e.dir); n != 0 {
		t.Errorf("%d mounts left under %s", n, e.dir)
	}
}

func mountsUnder(t *testing.T, dir string) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			n++
		}
	}
	return n
}

func podConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name, Attempt: 0},
		Hostname:     name,
		LogDirectory: "",
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"default.svc.cluster.local"}, Options: []string{"ndots:5"}},
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080}},
		Labels:       map[string]string{"app": name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			Sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "77", "kernel.shm_rmid_forced": "1"},
			// As the kubelet sends it for pods without shareProcessNamespace;
			// the zero value (POD) would ask for a shared PID namespace.
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
		},
	}
}

func readInNS(t *testing.T, pins map[netns.Kind]string, file string) string {
	t.Helper()
	var out string
	err := netns.Do(pins, func() error {
		b, err := os.ReadFile(file)
		out = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRunStopRemove(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, err := e.m.Run(ctx, podConfig("web"), "runc")
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 64 {
		t.Fatalf("id %q", id)
	}
	sb, err := e.m.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != StateReady || sb.RuntimeHandler != "runc" || strings.Join(sb.IPs, ",") != "10.88.0.7,fd00::7" {
		t.Fatalf("sandbox %+v", sb)
	}
	wantSlice := "podunit-pod-" + id + ".slice"
	if sb.Slice != wantSlice || sb.CgroupParent != "/podunit.slice/podunit-pod.slice/"+wantSlice || !sb.OwnSlice {
		t.Fatalf("slice %q %q", sb.Slice, sb.CgroupParent)
	}
	if _, ok := e.sd.Units[wantSlice]; !ok {
		t.Fatalf("slice not started: %v", e.sd.Calls)
	}
	for _, p := range []string{sb.NetNSPath, sb.IPCNSPath, sb.UTSNSPath} {
		if !netns.IsPinned(p) {
			t.Fatalf("%s not pinned", p)
		}
	}
	if sb.PIDNSPath != "" || sb.InitUnit != "" {
		t.Fatalf("pid namespace without NamespaceMode POD: %q", sb.PIDNSPath)
	}
	pins := map[netns.Kind]string{netns.Net: sb.NetNSPath, netns.IPC: sb.IPCNSPath, netns.UTS: sb.UTSNSPath}
	if got := readInNS(t, pins, "/proc/sys/net/ipv4/ip_unprivileged_port_start"); got != "77" {
		t.Errorf("net sysctl in pod = %q", got)
	}
	if got := readInNS(t, pins, "/proc/sys/kernel/shm_rmid_forced"); got != "1" {
		t.Errorf("ipc sysctl in pod = %q", got)
	}
	if got := readInNS(t, pins, "/proc/sys/kernel/hostname"); got != "web" {
		t.Errorf("hostname in pod = %q", got)
	}
	if got := readInNS(t, pins, "/sys/class/net/lo/operstate"); got == "down" {
		t.Errorf("lo is down")
	}
	if b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); strings.TrimSpace(string(b)) == "77" {
		t.Errorf("pod sysctl leaked to the host")
	}
	files := map[string]string{
		sb.ResolvConfPath: "search default.svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
		sb.HostnamePath:   "web\n",
	}
	for p, want := range files {
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Errorf("%s = %q, want %q", p, b, want)
		}
	}
	if b, _ := os.ReadFile(sb.HostsPath); !strings.Contains(string(b), "10.88.0.7\tweb\n") {
		t.Errorf("hosts: %s", b)
	}
	if mountsUnder(t, e.dir) != 4 { // 3 pins + shm
		t.Errorf("mounts under run dir: %d", mountsUnder(t, e.dir))
	}
	if r := e.net.reqs[0]; len(r.PortMappings) != 1 || r.PortMappings[0].HostPort != 8080 || r.PortMappings[0].Protocol != "tcp" || r.CgroupPath != sb.CgroupParent {
		t.Errorf("cni request %+v", r)
	}

	for i := 0; i < 2; i++ {
		if err := e.m.Stop(ctx, id); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
	if e.net.count("del") != 1 {
		t.Fatalf("stop: net %v", e.net.calls)
	}
	sb, _ = e.m.Get(ctx, id)
	if sb.State != StateNotReady || !netns.IsPinned(sb.NetNSPath) {
		t.Fatalf("after stop: %+v", sb)
	}
	// What the OCI runtime leaves in a v1 hierarchy systemd does not
	// manage: the container's path, parents included.
	freezer := filepath.Join(e.dir, "cgroup", "freezer", sb.CgroupParent)
	os.MkdirAll(filepath.Join(freezer, "podunit-ctr-x.service", "container"), 0o755)
	for i := 0; i < 2; i++ {
		if err := e.m.Remove(ctx, id); err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
	}
	if _, err := e.m.Get(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get after remove: %v", err)
	}
	if _, err := os.Stat(freezer); !os.IsNotExist(err) {
		t.Errorf("the pod slice's freezer cgroup is left: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(freezer)); err != nil {
		t.Errorf("the parent slice's freezer cgroup went with the pod: %v", err)
	}
	if _, ok := e.sd.Units[wantSlice]; ok {
		t.Fatal("own slice left")
	}
	assertNoTraces(t, e, id)
	if err := e.m.Stop(ctx, id); err != nil {
		t.Fatalf("stop after remove: %v", err)
	}
}

func assertNoTraces(t *testing.T, e *env, id string) {
	t.Helper()
	for _, p := range []string{
		e.m.statePath(id), e.m.podDir(id), e.m.pinPath("net", id), e.m.pinPath("ipc", id),
		e.m.pinPath("uts", id), e.m.pinPath("pid", id), e.m.pinPath("user", id),
	} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(b), id) {
		t.Errorf("mounts of pod %s left:\n%s", id, b)
	}
}

func TestNameReserved(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, err := e.m.Run(ctx, podConfig("a"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Run(ctx, podConfig("a"), ""); !errors.Is(err, errdefs.ErrExists) || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("duplicate: %v", err)
	}
	next := podConfig("a")
	next.Metadata.Attempt = 1
	id2, err := e.m.Run(ctx, next, "")
	if err != nil {
		t.Fatalf("next attempt: %v", err)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	id3, err := e.m.Run(ctx, podConfig("a"), "")
	if err != nil {
		t.Fatalf("name not released: %v", err)
	}
	if id3 == id || id3 == id2 {
		t.Fatal("ID reused")
	}
}

func TestInvalidRequests(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cases := map[string]func(c *runtimeapi.PodSandboxConfig) string{
		"handler":        func(c *runtimeapi.PodSandboxConfig) string { return "kata" },
		"parent":         func(c *runtimeapi.PodSandboxConfig) string { c.Linux.CgroupParent = "/sys/fs/cgroup/x"; return "" },
		"parent path":    func(c *runtimeapi.PodSandboxConfig) string { c.Linux.CgroupParent = "../x.slice"; return "" },
		"sysctl":         func(c *runtimeapi.PodSandboxConfig) string { c.Linux.Sysctls["kernel.pid_max"] = "1"; return "" },
		"hostnet sysctl": hostNet,
		"metadata":       func(c *runtimeapi.PodSandboxConfig) string { c.Metadata = nil; return "" },
		"hostname":       func(c *runtimeapi.PodSandboxConfig) string { c.Hostname = "a b"; return "" },
		"dns":            func(c *runtimeapi.PodSandboxConfig) string { c.DnsConfig.Servers = []string{"1.1.1.1\nx"}; return "" },
	}
	for name, mut := range cases {
		c := podConfig("bad")
		h := mut(c)
		if _, err := e.m.Run(ctx, c, h); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if len(e.sd.Calls) != 0 || e.net.count("") != 0 {
		t.Fatalf("invalid requests reached systemd or CNI: %v %v", e.sd.Calls, e.net.calls)
	}
	ents, _ := os.ReadDir(e.opts.RunDir)
	if len(ents) != 0 {
		t.Fatalf("invalid requests created %v", ents)
	}
}

func hostNet(c *runtimeapi.PodSandboxConfig) string {
	c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
	}
	return ""
}

func TestCNIFailureRollsBack(t *testing.T) {
	e := newEnv(t)
	e.net.setupErr = errors.New("bridge plugin exploded")
	_, err := e.m.Run(context.Background(), podConfig("x"), "")
	if err == nil {
		t.Fatal("Run succeeded")
	}
	if len(e.m.List(context.Background())) != 0 {
		t.Fatal("failed pod listed")
	}
	if e.net.count("del") != 1 {
		t.Fatalf("no DEL after failed ADD: %v", e.net.calls)
	}
	if len(e.sd.Units) != 0 {
		t.Fatalf("units left: %v", e.sd.Units)
	}
	id := e.net.reqs[0].PodID
	assertNoTraces(t, e, id)
	e.net.setupErr = nil
	if _, err := e.m.Run(context.Background(), podConfig("x"), ""); err != nil {
		t.Fatalf("name kept after rollback: %v", err)
	}
}

func TestSliceFailureRollsBack(t *testing.T) {
	e := newEnv(t)
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult { return systemd.JobFailed }
	if _, err := e.m.Run(context.Background(), podConfig("x"), ""); !systemd.IsJobError(err) {
		t.Fatalf("Run: %v", err)
	}
	if n := mountsUnder(t, e.dir); n != 0 {
		t.Fatalf("%d mounts", n)
	}
	files, _ := filepath.Glob(filepath.Join(e.opts.StateDir, "sandboxes", "*"))
	if len(files) != 0 {
		t.Fatalf("state left: %v", files)
	}
}

func TestHostNamespacesAndKubeletSlice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const parent = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid1.slice"
	e.sd.Units["kubepods-burstable-poduid1.slice"] = &systemdtest.Unit{Name: "kubepods-burstable-poduid1.slice", Props: map[string]any{}, ActiveState: "active"}
	c := podConfig("h")
	c.Linux.Sysctls = nil
	c.Linux.CgroupParent = parent
	c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 1024, MemoryLimitInBytes: 256 << 20}
	c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE,
	}}
	id, err := e.m.Run(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := e.m.Get(ctx, id)
	if sb.NetNSPath != "" || sb.IPCNSPath != "" || sb.UTSNSPath != "" || sb.ShmPath != "" || sb.PIDNSPath != "" || len(sb.IPs) != 0 {
		t.Fatalf("host namespaces: %+v", sb)
	}
	if sb.Slice != "kubepods-burstable-poduid1.slice" || sb.CgroupParent != parent || sb.OwnSlice {
		t.Fatalf("slice %+v", sb)
	}
	if e.net.count("") != 0 {
		t.Fatal("CNI called for a host-network pod")
	}
	// The kubelet sized its slice (overhead included); the CRI's pod
	// resources, only the containers' sum, must not overwrite it.
	u := e.sd.Units[sb.Slice]
	if len(u.Props) != 0 {
		t.Fatalf("kubelet's slice changed: %v", u.Props)
	}
	if err := e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20}); err != nil {
		t.Fatal(err)
	}
	if len(u.Props) != 0 {
		t.Fatalf("kubelet's slice changed by UpdatePodSandboxResources: %v", u.Props)
	}
	if sb, _ := e.m.Get(ctx, id); sb.Config.GetLinux().GetResources().GetMemoryLimitInBytes() != 128<<20 {
		t.Fatalf("pod resources not recorded: %v", sb.Config.GetLinux().GetResources())
	}
	host, _ := os.Hostname()
	if b, _ := os.ReadFile(sb.HostnamePath); string(b) != host+"\n" {
		t.Fatalf("hostname file %q", b)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.sd.Units[sb.Slice]; !ok {
		t.Fatal("kubelet's slice was removed")
	}
	assertNoTraces(t, e, id)
}

// A node without /etc/hosts (minimal images) must still run host-network
// pods: they get the loopback entries, as containerd and CRI-O give them.
func TestHostNetworkPodWithoutNodeHostsFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-hosts")
	e := newEnv(t, func(o *Options) { o.HostHosts = missing })
	ctx := context.Background()
	c := podConfig("nohosts")
	c.Linux.Sysctls = nil
	c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, // no pod init to fake
	}}
	id, err := e.m.Run(ctx, c, "")
	if err != nil {
		t.Fatalf("host-network pod on a node without %s: %v", missing, err)
	}
	sb, _ := e.m.Get(ctx, id)
	if b, err := os.ReadFile(sb.HostsPath); err != nil || string(b) != string(podfiles.Hosts("", nil)) {
		t.Fatalf("pod hosts file %q, %v; want the loopback defaults", b, err)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNoTraces(t, e, id)

	// a hosts path that exists but is no regular file still fails the pod
	e2 := newEnv(t, func(o *Options) { o.HostHosts = t.TempDir() })
	c.Metadata.Name = "dirhosts"
	if _, err := e2.m.Run(ctx, c, ""); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("RunPodSandbox with a directory as the node hosts file: %v, want an error saying it is not a regular file", err)
	}
	if n := len(e2.m.List(ctx)); n != 0 {
		t.Fatalf("%d pods left after the failed run", n)
	}
}

type initProc struct {
	p    *os.Process
	done chan struct{}
}

func TestSharedPIDNamespace(t *testing.T) {
	e := newEnv(t)
	if _, err := exec.LookPath("catatonit"); err != nil {
		t.Fatalf("catatonit missing: %v", err)
	}
	var procs sync.Map
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
		argv := u.Props["ExecStart"]
		if !strings.HasSuffix(u.Name, "-init.service") {
			return systemd.JobDone
		}
		cmd := exec.Command(DefaultPodInit[0], DefaultPodInit[1:]...)
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
			// unshare blocks SIGTERM while it waits; systemd signals the
			// whole cgroup instead, catatonit included.
			ip := p.(initProc)
			ip.p.Kill()
			<-ip.done
		}
		return systemd.JobDone
	}
	c := podConfig("p")
	c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}}
	ctx := context.Background()
	id, err := e.m.Run(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := e.m.Get(ctx, id)
	if sb.InitUnit != "podunit-pod-"+id+"-init.service" || !netns.IsPinned(sb.PIDNSPath) {
		t.Fatalf("init %q pin %q", sb.InitUnit, sb.PIDNSPath)
	}
	a, _ := netns.Inode(sb.PIDNSPath)
	b, _ := netns.Inode("/proc/self/ns/pid")
	if a == b {
		t.Fatal("pinned the host pid namespace")
	}
	if u := e.sd.Units[sb.InitUnit]; u.Props["Slice"] != sb.Slice || u.Props["CollectMode"] != "inactive-or-failed" {
		t.Fatalf("init props %v", u.Props)
	}
	if err := e.m.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if netns.IsPinned(sb.PIDNSPath) {
		t.Fatal("pid ns still pinned after stop")
	}
	if _, ok := e.sd.Units[sb.InitUnit]; ok {
		t.Fatal("init unit left after stop")
	}
	if n := countInits(t); n != 0 {
		t.Fatalf("%d catatonit processes left", n)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNoTraces(t, e, id)
}

func TestRecover(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ready, err := e.m.Run(ctx, podConfig("ready"), "crun")
	if err != nil {
		t.Fatal(err)
	}
	lost, err := e.m.Run(ctx, podConfig("lost"), "")
	if err != nil {
		t.Fatal(err)
	}
	sbLost, _ := e.m.Get(ctx, lost)
	netns.Unpin(sbLost.NetNSPath) // as after a reboot emptied /run

	// A sandbox caught half-way: record on disk, pins made, no network.
	p, _ := e.m.validate(podConfig("half"), "")
	half := e.m.newSandbox(newID(), podConfig("half"), "", p)
	if err := e.m.save(half, phaseCreating); err != nil {
		t.Fatal(err)
	}
	if err := e.m.setupNamespaces(half, p); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.opts.StateDir, "sandboxes", "garbage.json"), []byte("{"), 0o600)

	m2, err := New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	e.m = m2
	os.Remove(filepath.Join(e.opts.StateDir, "sandboxes", "garbage.json"))
	sb, err := m2.Get(ctx, ready)
	if err != nil || sb.State != StateReady || sb.IPs[0] != "10.88.0.7" || sb.RuntimeHandler != "crun" ||
		sb.Config.GetMetadata().GetName() != "ready" || sb.Config.GetDnsConfig().GetServers()[0] != "10.96.0.10" {
		t.Fatalf("recovered %+v %v", sb, err)
	}
	if sb, _ := m2.Get(ctx, lost); sb.State != StateNotReady {
		t.Fatalf("pod without pins is %s", sb.State)
	}
	if _, err := m2.Get(ctx, half.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("half-created pod recovered: %v", err)
	}
	assertNoTraces(t, e, half.ID)
	if _, err := m2.Run(ctx, podConfig("ready"), ""); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("name reservation not recovered: %v", err)
	}
}

func TestListAndResolve(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, _ := e.m.Run(ctx, podConfig("a"), "")
	b, _ := e.m.Run(ctx, podConfig("b"), "")
	l := e.m.List(ctx)
	if len(l) != 2 || l[0].ID != a || l[1].ID != b {
		t.Fatalf("list order %v", l)
	}
	if got, err := e.m.Resolve(a[:12]); err != nil || got != a {
		t.Fatalf("resolve: %q %v", got, err)
	}
	if _, err := e.m.Resolve("zz"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("resolve missing: %v", err)
	}
	l[0].Config.Metadata.Name = "mutated"
	if sb, _ := e.m.Get(ctx, a); sb.Config.Metadata.Name != "a" {
		t.Fatal("List returned shared config")
	}
}

func TestUpdateResources(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := podConfig("u")
	c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuQuota: 10000, CpuPeriod: 100000, MemoryLimitInBytes: 100 << 20}
	c.Linux.Overhead = &runtimeapi.LinuxContainerResources{CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 140 << 20}
	id, err := e.m.Run(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := e.m.Get(ctx, id)
	// podunit's own slice: the containers' sum plus the overhead
	if p := e.sd.Units[sb.Slice].Props; p["CPUQuotaPerSecUSec"] != uint64(300000) || p["MemoryMax"] != uint64(240<<20) {
		t.Fatalf("slice at run %v", p)
	}
	err = e.m.UpdateResources(ctx, id, &runtimeapi.LinuxContainerResources{CpuQuota: 50000, CpuPeriod: 100000})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.sd.Units[sb.Slice].Props["CPUQuotaPerSecUSec"]; got != uint64(700000) {
		t.Fatalf("quota %v", got)
	}
	if err := e.m.UpdateResources(ctx, "nope", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal(err)
	}
}

// Lookups read the published state: the kubelet's relist and container
// creates in other pods do not wait for a pod's slow CNI DEL.
func TestLookupsDoNotWaitForStop(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, err := e.m.Run(ctx, podConfig("slow"), "")
	if err != nil {
		t.Fatal(err)
	}
	e.net.inDel, e.net.delDone = make(chan struct{}), make(chan struct{})
	stopped := make(chan error, 1)
	go func() { stopped <- e.m.Stop(ctx, id) }()
	<-e.net.inDel
	if sb, err := e.m.Get(ctx, id); err != nil || sb.State != StateReady {
		t.Fatalf("Get during stop: %v %v", sb, err)
	}
	if l := e.m.List(ctx); len(l) != 1 {
		t.Fatalf("List during stop: %v", l)
	}
	close(e.net.delDone)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	e.net.inDel, e.net.delDone = nil, nil
	if sb, _ := e.m.Get(ctx, id); sb.State != StateNotReady {
		t.Fatalf("after stop: %v", sb.State)
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
}

func TestRecoverWithSystemdDown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
		if strings.HasSuffix(u.Name, "-init.service") {
			// a process in a new pid namespace, as the real init unit has
			cmd := exec.Command(DefaultPodInit[0], DefaultPodInit[1:]...)
			if err := cmd.Start(); err != nil {
				return systemd.JobFailed
			}
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			t.Cleanup(func() { cmd.Process.Kill(); <-done })
			u.Props["MainPID"] = uint32(cmd.Process.Pid)
		}
		return systemd.JobDone
	}
	c := podConfig("s")
	c.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	id, err := e.m.Run(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	e.sd.Down = true
	m2, _ := New(e.opts)
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if sb, _ := m2.Get(ctx, id); sb.State != StateReady {
		t.Fatal("pod marked not ready because systemd did not answer")
	}
	e.sd.Down = false
	delete(e.sd.Units, "podunit-pod-"+id+"-init.service")
	m3, _ := New(e.opts)
	if err := m3.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if sb, _ := m3.Get(ctx, id); sb.State != StateNotReady {
		t.Fatal("pod whose init unit is gone still ready")
	}
}

// countInits counts live catatonit processes that are children of this
// test process' init wrappers.
func countInits(t *testing.T) int {
	t.Helper()
	self := os.Getpid()
	n := 0
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil || !strings.Contains(string(b), "(unshare)") {
			continue
		}
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
		if len(f) > 1 && f[0] != "Z" && f[1] == fmt.Sprint(self) {
			n++
		}
	}
	return n
}

func TestSetHandlers(t *testing.T) {
	e := newEnv(t)
	if _, err := e.m.Run(context.Background(), podConfig("k1"), "kata"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("unknown handler: %v, want ErrInvalid", err)
	}
	e.m.SetHandlers([]string{"runc", "kata"})
	if _, err := e.m.Run(context.Background(), podConfig("k2"), "kata"); err != nil {
		t.Fatalf("handler added by a reload: %v", err)
	}
	e.m.SetHandlers([]string{"runc"})
	if _, err := e.m.Run(context.Background(), podConfig("k3"), "kata"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("handler dropped by a reload: %v, want ErrInvalid", err)
	}
}
