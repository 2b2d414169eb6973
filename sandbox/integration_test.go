//go:build integration

package sandbox_test

// Integration tests run in two halves. TestSandboxInHarness (on the host, as
// root) boots a real systemd with test/harness and runs this same test
// binary inside it with PODUNIT_SANDBOX_INSIDE set; its subtests there
// use the real systemd (slices, the pod init unit), real namespaces and
// real CNI plugins (bridge, host-local, portmap) in the harness' own
// network namespace, so the host's network is never touched.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/netns"
	"github.com/podunit/podunit/sandbox"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/test/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const insideEnv = "PODUNIT_SANDBOX_INSIDE"

// TestSandboxInHarness is the only top-level test: on the host it boots the
// harness and re-runs itself inside; inside, it runs the real checks as
// subtests. Neither half ever skips.
func TestSandboxInHarness(t *testing.T) {
	if os.Getenv(insideEnv) != "" {
		for _, c := range []struct {
			name string
			fn   func(*testing.T)
		}{
			{"Leak100", testLeak100},
			{"PodsReachEachOtherAndHostPort", testPodsReachEachOtherAndHostPort},
			{"SharedPIDAndSlices", testSharedPIDAndSlices},
			{"KubeletSliceIsNotRemoved", testKubeletSliceIsNotRemoved},
			{"RuncJoinsPinnedNamespaces", testRuncJoinsPinnedNamespaces},
		} {
			t.Run(c.name, c.fn)
		}
		return
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := harness.Start(t, harness.Options{Binds: []string{filepath.Dir(bin)}})
	run := "^TestSandboxInHarness$"
	if f := flagValue("test.run"); strings.Contains(f, "/") {
		run = f // a subtest selection passes through
	}
	out, err := h.ExecTimeout(15*time.Minute, "env", insideEnv+"=1", bin, "-test.v", "-test.count=1", "-test.run", run)
	t.Logf("inside the harness:\n%s", out)
	if err != nil {
		t.Fatalf("tests inside the harness failed: %v", err)
	}
	if !strings.Contains(out, "--- PASS: TestSandboxInHarness") {
		t.Fatal("the tests inside the harness did not pass")
	}
}

func flagValue(name string) string {
	for i, a := range os.Args {
		if strings.HasPrefix(a, "-"+name+"=") {
			return strings.TrimPrefix(a, "-"+name+"=")
		}
		if a == "-"+name && i+1 < len(os.Args) {
			return os.Args[i+1]
		}
	}
	return ""
}

type world struct {
	m       *sandbox.Manager
	opts    sandbox.Options
	sd      systemd.Conn
	ipamDir string
	runDir  string
}

const cniConf = `{
  "cniVersion": "1.0.0",
  "name": "putest",
  "plugins": [
    {"type": "bridge", "bridge": "putest0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.203.0.0/24"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}`

func inside(t *testing.T) *world {
	t.Helper()
	// /var/lib/podunit is a real host directory bound in by the harness;
	// /run is the harness' own.
	base := filepath.Join(harness.StateDirInside, "sbtest-"+filepath.Base(t.Name()))
	os.RemoveAll(base)
	w := &world{ipamDir: filepath.Join(base, "ipam"), runDir: filepath.Join("/run/podunit-sbtest", filepath.Base(t.Name()))}
	conf := filepath.Join(base, "net.d")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(conf, "10-putest.conflist"), []byte(fmt.Sprintf(cniConf, w.ipamDir)), 0o644)
	var err error
	w.sd, err = systemd.New(systemd.Options{
		CallTimeout:     20 * time.Second,
		MaxParallelJobs: config.Default().Systemd.MaxParallelJobs,
		// godbus closes a connection when the context it was dialled with
		// ends; the connection must outlive the call that dialled it.
		Dial: func(ctx context.Context) (*sddbus.Conn, error) {
			return sddbus.NewSystemConnectionContext(context.WithoutCancel(ctx))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.sd.Ping(context.Background()); err != nil {
		t.Fatalf("systemd: %v", err)
	}
	w.opts = sandbox.Options{
		StateDir: filepath.Join(base, "state"), RunDir: w.runDir,
		CNIConfDir: conf, CNIBinDirs: []string{"/usr/lib/cni"}, CNICacheDir: filepath.Join(base, "cni-cache"),
		Systemd:     w.sd,
		CgroupRoot:  "/sys/fs/cgroup",
		ParentSlice: config.Default().Systemd.ParentSlice,
		OpTimeout:   config.Default().Systemd.CallTimeout.D(),
	}
	m, err := sandbox.New(w.opts)
	if err != nil {
		t.Fatal(err)
	}
	w.m = m
	t.Cleanup(func() {
		for _, p := range m.List(context.Background()) {
			if err := m.Remove(context.Background(), p.ID); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		w.sd.Close()
	})
	return w
}

func pod(name string, ports ...*runtimeapi.PortMapping) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "it", Uid: "uid-" + name},
		Hostname:     name,
		PortMappings: ports,
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			Sysctls: map[string]string{"net.ipv4.ping_group_range": "0 2147483647", "kernel.shm_rmid_forced": "1"},
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
		},
	}
}

func mountCount(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func dirEntries(dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// ipAllocations lists host-local's reservations (one file per IP).
func ipAllocations(dir string) []string {
	var out []string
	for _, f := range dirEntries(dir) {
		b := filepath.Base(f)
		if b != "lock" && !strings.HasPrefix(b, "last_reserved_ip") {
			out = append(out, f)
		}
	}
	return out
}

func podUnits(t *testing.T, w *world) []string {
	us, err := w.sd.ListUnits(context.Background(), "podunit-pod-*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range us {
		if u.ActiveState != "inactive" {
			out = append(out, u.Name+"="+u.ActiveState)
		}
	}
	return out
}

func testLeak100(t *testing.T) {
	w := inside(t)
	ctx := context.Background()
	run := func(i int) {
		c := pod(fmt.Sprintf("leak-%d", i), &runtimeapi.PortMapping{ContainerPort: 80, HostPort: 20080})
		if i%2 == 0 {
			// half the pods share a PID namespace: an init unit and a pin
			c.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
		}
		t0 := time.Now()
		id, err := w.m.Run(ctx, c, "")
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		t1 := time.Now()
		if err := w.m.Stop(ctx, id); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
		t2 := time.Now()
		if err := w.m.Remove(ctx, id); err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
		if total := time.Since(t0); total > 2*time.Second {
			t.Logf("slow cycle %d (pid %v): run %v stop %v remove %v", i,
				c.Linux.SecurityContext.NamespaceOptions.Pid, t1.Sub(t0), t2.Sub(t1), time.Since(t2))
		}
	}
	// The first pod creates the bridge and portmap's chains, which stay.
	first := time.Now()
	run(-1)
	t.Logf("first pod (creates the bridge): %v", time.Since(first))
	mounts := mountCount(t)
	var durs []time.Duration
	for i := 0; i < 100; i++ {
		start := time.Now()
		run(i)
		durs = append(durs, time.Since(start))
	}
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	t.Logf("run+stop+remove: p50 %v p99 %v max %v", durs[49], durs[98], durs[99])
	if got := mountCount(t); got != mounts {
		t.Errorf("mounts: %d before, %d after", mounts, got)
	}
	for _, kind := range []string{"netns", "ipcns", "utsns", "pidns", "sandboxes"} {
		if left := dirEntries(filepath.Join(w.runDir, kind)); len(left) != 0 {
			t.Errorf("%s left: %v", kind, left)
		}
	}
	if left := ipAllocations(w.ipamDir); len(left) != 0 {
		t.Errorf("host-local allocations left: %v", left)
	}
	if left := podUnits(t, w); len(left) != 0 {
		t.Errorf("units left: %v", left)
	}
	if out, err := exec.Command("pgrep", "-c", "catatonit").Output(); err == nil {
		t.Errorf("init processes left: %s", out)
	}
	if len(w.m.List(ctx)) != 0 {
		t.Error("pods still listed")
	}
}

// listen opens a TCP listener inside a pod's network namespace; the socket
// stays in that namespace whichever thread later accepts on it.
func listen(t *testing.T, netnsPath, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	err := netns.Do(map[netns.Kind]string{netns.Net: netnsPath}, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "pong %s", line)
			}()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return l
}

func ping(t *testing.T, fromNetNS, addr string) string {
	t.Helper()
	var c net.Conn
	dial := func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}
	var err error
	if fromNetNS == "" {
		err = dial()
	} else {
		err = netns.Do(map[netns.Kind]string{netns.Net: fromNetNS}, dial)
	}
	if err != nil {
		t.Fatalf("dial %s from %q: %v", addr, fromNetNS, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "ping\n")
	b, _ := io.ReadAll(c)
	return string(b)
}

func testPodsReachEachOtherAndHostPort(t *testing.T) {
	w := inside(t)
	ctx := context.Background()
	a, err := w.m.Run(ctx, pod("a", &runtimeapi.PortMapping{ContainerPort: 8080, HostPort: 18080}), "")
	if err != nil {
		t.Fatal(err)
	}
	cb := pod("b")
	cb.Annotations = map[string]string{"kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "20M"}
	b, err := w.m.Run(ctx, cb, "")
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := w.m.Get(ctx, a)
	sb, _ := w.m.Get(ctx, b)
	if len(sa.IPs) == 0 || len(sb.IPs) == 0 || sa.IPs[0] == sb.IPs[0] || !strings.HasPrefix(sa.IPs[0], "10.203.0.") {
		t.Fatalf("pod IPs %v %v", sa.IPs, sb.IPs)
	}
	hosts, _ := os.ReadFile(sa.HostsPath)
	if !strings.Contains(string(hosts), sa.IPs[0]+"\ta\n") {
		t.Errorf("hosts file: %s", hosts)
	}
	pins := map[netns.Kind]string{netns.Net: sa.NetNSPath, netns.IPC: sa.IPCNSPath, netns.UTS: sa.UTSNSPath}
	err = netns.Do(pins, func() error {
		for f, want := range map[string]string{
			"/proc/sys/kernel/shm_rmid_forced":    "1",
			"/proc/sys/net/ipv4/ping_group_range": "0\t2147483647",
			"/proc/sys/kernel/hostname":           "a",
		} {
			if b, _ := os.ReadFile(f); strings.TrimSpace(string(b)) != want {
				t.Errorf("%s in pod = %q, want %q", f, b, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile("/proc/sys/kernel/shm_rmid_forced"); strings.TrimSpace(string(b)) == "1" {
		t.Error("kernel.shm_rmid_forced leaked out of the pod")
	}
	listen(t, sa.NetNSPath, ":8080")
	if got := ping(t, sb.NetNSPath, net.JoinHostPort(sa.IPs[0], "8080")); got != "pong ping\n" {
		t.Fatalf("pod b -> pod a: %q", got)
	}
	// The node's side of the bridge is a local address: portmap's OUTPUT
	// rule DNATs it to the pod.
	if got := ping(t, "", "10.203.0.1:18080"); got != "pong ping\n" {
		t.Fatalf("host port: %q", got)
	}
	if err := w.m.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	netns.Do(map[netns.Kind]string{netns.Net: sb.NetNSPath}, func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(sa.IPs[0], "8080"), time.Second)
		return err
	})
	if c != nil {
		c.Close()
		t.Fatal("stopped pod still reachable")
	}
	ifbs := func() (n int) {
		links, _ := os.ReadDir("/sys/class/net")
		for _, l := range links {
			if strings.HasPrefix(l.Name(), "bwp") {
				n++
			}
		}
		return n
	}
	// The bandwidth plugin shapes egress through an ifb device per pod,
	// which must go with the pod.
	if ifbs() != 1 {
		t.Errorf("bandwidth annotation gave %d ifb devices, want 1", ifbs())
	}
	if err := w.m.Remove(ctx, b); err != nil {
		t.Fatal(err)
	}
	if ifbs() != 0 {
		t.Error("bandwidth device left after remove")
	}
}

func testSharedPIDAndSlices(t *testing.T) {
	w := inside(t)
	ctx := context.Background()
	c := pod("shared", &runtimeapi.PortMapping{ContainerPort: 9090, HostPort: 19090})
	c.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	c.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 512 << 20, CpuShares: 512}
	id, err := w.m.Run(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := w.m.Get(ctx, id)
	if !netns.IsPinned(sb.PIDNSPath) {
		t.Fatal("pid namespace not pinned")
	}
	a, _ := netns.Inode(sb.PIDNSPath)
	b, _ := netns.Inode("/proc/self/ns/pid")
	if a == b {
		t.Fatal("pinned our own pid namespace")
	}
	props, err := w.sd.UnitProperties(ctx, sb.InitUnit, "Service")
	if err != nil || props["Slice"] != sb.Slice {
		t.Fatalf("init unit %v %v", props["Slice"], err)
	}
	uprops, _ := w.sd.UnitProperties(ctx, sb.InitUnit, "Unit")
	if uprops["ActiveState"] != "active" {
		t.Fatalf("init unit %v", uprops["ActiveState"])
	}
	sprops, err := w.sd.UnitProperties(ctx, sb.Slice, "Slice")
	if err != nil || sprops["MemoryMax"] != uint64(512<<20) || sprops["CPUWeight"] != uint64(20) {
		t.Fatalf("slice props MemoryMax=%v CPUWeight=%v %v", sprops["MemoryMax"], sprops["CPUWeight"], err)
	}
	// A restarted podunit (a second manager on the same state) finds the
	// pod as it was and can stop and remove it, port mapping rules included.
	m2, err := sandbox.New(w.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := m2.Get(ctx, id); err != nil || got.State != sandbox.StateReady || got.IPs[0] != sb.IPs[0] || got.NetNSPath != sb.NetNSPath {
		t.Fatalf("recovered %+v %v", got, err)
	}
	rules, _ := exec.Command("iptables-save").Output()
	if !strings.Contains(string(rules), id) {
		t.Fatalf("no portmap rules for the pod:\n%s", rules)
	}
	if err := m2.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if netns.IsPinned(sb.PIDNSPath) {
		t.Fatal("pid ns pinned after stop")
	}
	if err := m2.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if left := podUnits(t, w); len(left) != 0 {
		t.Fatalf("units left: %v", left)
	}
	if rules, _ := exec.Command("iptables-save").Output(); strings.Contains(string(rules), id) {
		t.Fatalf("portmap rules left:\n%s", rules)
	}
	if left := ipAllocations(w.ipamDir); len(left) != 0 {
		t.Fatalf("IPs left: %v", left)
	}
}

func testKubeletSliceIsNotRemoved(t *testing.T) {
	w := inside(t)
	ctx := context.Background()
	const slice = "kubepods-besteffort-poditest.slice"
	if err := w.sd.StartTransientUnit(ctx, slice, nil); err != nil {
		t.Fatal(err)
	}
	defer w.sd.StopUnit(ctx, slice)
	c := pod("kube")
	c.Linux.CgroupParent = "/kubepods.slice/kubepods-besteffort.slice/" + slice
	id, err := w.m.Run(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	props, err := w.sd.UnitProperties(ctx, slice, "Unit")
	if err != nil || props["ActiveState"] != "active" {
		t.Fatalf("kubelet slice after remove: %v %v", props["ActiveState"], err)
	}
}

// testRuncJoinsPinnedNamespaces proves the pins are what an OCI runtime
// needs: a container that joins them by path sees the pod's IP, hostname,
// sysctls and, with a shared PID namespace, catatonit as PID 1.
func testRuncJoinsPinnedNamespaces(t *testing.T) {
	w := inside(t)
	ctx := context.Background()
	c := pod("oci")
	c.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	id, err := w.m.Run(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := w.m.Get(ctx, id)
	bundle := filepath.Join(harness.StateDirInside, "sbtest-oci-bundle")
	// The repository is bound at the same path inside the harness.
	script, err := harness.BusyboxBundleScript()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script, bundle, "--",
		"sh", "-c", "ip -o -4 addr show eth0; hostname; cat /proc/1/cmdline; echo; cat /proc/sys/kernel/shm_rmid_forced").CombinedOutput(); err != nil {
		t.Fatalf("bundle: %v\n%s", err, out)
	}
	defer os.RemoveAll(bundle)
	cfgPath := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	paths := map[specs.LinuxNamespaceType]string{
		specs.NetworkNamespace: sb.NetNSPath, specs.IPCNamespace: sb.IPCNSPath,
		specs.UTSNamespace: sb.UTSNSPath, specs.PIDNamespace: sb.PIDNSPath,
	}
	for i, ns := range spec.Linux.Namespaces {
		if p, ok := paths[ns.Type]; ok {
			spec.Linux.Namespaces[i].Path = p
		}
	}
	spec.Hostname = ""
	if b, err = json.Marshal(&spec); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cfgPath, b, 0o644)
	out, err := exec.Command("runc", "run", "--bundle", bundle, "sbtest-"+id[:12]).CombinedOutput()
	exec.Command("runc", "delete", "--force", "sbtest-"+id[:12]).Run()
	if err != nil {
		t.Fatalf("runc: %v\n%s", err, out)
	}
	for _, want := range []string{"inet " + sb.IPs[0] + "/24", "\noci\n", "catatonit", "\n1\n"} {
		if !strings.Contains("\n"+string(out), want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
}
