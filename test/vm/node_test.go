//go:build vm

// The node tier's CRI tests: podunit as the package installed it in the
// VM, reached over the forwarded socket (PODUNIT_VM_CRI), the cgroup files
// read in the guest.
package vm

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/stats"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const busybox = "docker.io/library/busybox:1.37.0"

type node struct {
	rt  runtimeapi.RuntimeServiceClient
	img runtimeapi.ImageServiceClient
}

func criNode(t *testing.T) *node {
	t.Helper()
	sock := os.Getenv("PODUNIT_VM_CRI")
	if sock == "" {
		t.Fatal("PODUNIT_VM_CRI is not set: run test/vm/run.sh")
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	n := &node{rt: runtimeapi.NewRuntimeServiceClient(cc), img: runtimeapi.NewImageServiceClient(cc)}
	ctx := tctx(t, 5*time.Minute)
	if _, err := n.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: busybox}}); err != nil {
		t.Fatalf("pull %s on the node: %v", busybox, err)
	}
	return n
}

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pod runs a sandbox the way the kubelet's systemd driver asks for one (a
// kubepods slice as cgroup_parent) and removes it at cleanup.
func (n *node) pod(t *testing.T, name string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	uid := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "vmtest", Uid: uid},
		LogDirectory: "/var/log/pods/vmtest_" + name + "_" + uid,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice",
		},
	}
	resp, err := n.rt.RunPodSandbox(tctx(t, 3*time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id := resp.PodSandboxId
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("StopPodSandbox: %v", err)
		}
		if _, err := n.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("RemovePodSandbox: %v", err)
		}
	})
	return id, cfg
}

func (n *node) start(t *testing.T, pod string, pcfg *runtimeapi.PodSandboxConfig, name string, res *runtimeapi.LinuxContainerResources, cmd ...string) string {
	t.Helper()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: busybox},
		Command:  cmd,
		LogPath:  name + "/0.log",
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: res},
	}
	c, err := n.rt.CreateContainer(tctx(t, 3*time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: pcfg})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", name, err)
	}
	if _, err := n.rt.StartContainer(tctx(t, 3*time.Minute), &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatalf("StartContainer %s: %v", name, err)
	}
	return c.ContainerId
}

// inside reads files in the container's own view (its /sys/fs/cgroup).
func (n *node) inside(t *testing.T, id string, files ...string) []string {
	t.Helper()
	r, err := n.rt.ExecSync(tctx(t, 2*time.Minute), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: append([]string{"cat"}, files...), Timeout: 100})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("cat %v in %s: %v (exit %d) %s", files, id, err, r.GetExitCode(), r.GetStderr())
	}
	return strings.Fields(string(r.Stdout))
}

// unitCgroup is the unit's cgroup directory in the guest.
func unitCgroup(t *testing.T, id string) string {
	t.Helper()
	cg := strings.TrimSpace(ssh(t, "systemctl show -P ControlGroup podunit-ctr-"+id+".service"))
	if cg == "" {
		t.Fatalf("unit of %s has no cgroup", id)
	}
	return "/sys/fs/cgroup" + cg
}

func wantFields(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s = %q, want %q", what, strings.Join(got, " "), strings.Join(want, " "))
	}
}

// A container reads its own limits from its /sys/fs/cgroup (what the JVM,
// Go and Node.js size themselves from), they follow
// UpdateContainerResources, systemd's unit holds the same limits, and a
// daemon-reload with the container running leaves every one as it was.
// The PSI files stats will read are there.
func TestNodeLimitsInsideContainer(t *testing.T) {
	n := criNode(t)
	pod, pcfg := n.pod(t, "limits")
	id := n.start(t, pod, pcfg, "limited", &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: 64 << 20, CpuQuota: 10000, CpuPeriod: 100000, CpuShares: 102,
		MemorySwapLimitInBytes: 64 << 20,
		Unified:                map[string]string{"memory.high": "62914560"},
	}, "sleep", "3600")
	wantFields(t, "inside memory.max cpu.max", n.inside(t, id, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max"), "67108864", "10000", "100000")
	wantFields(t, "inside memory.high (unified)", n.inside(t, id, "/sys/fs/cgroup/memory.high"), "62914560")
	unit := unitCgroup(t, id)
	wantFields(t, "unit memory.max cpu.max memory.swap.max", strings.Fields(ssh(t, "cat "+unit+"/memory.max "+unit+"/cpu.max "+unit+"/memory.swap.max")),
		"67108864", "10000", "100000", "0")

	if _, err := n.rt.UpdateContainerResources(tctx(t, 2*time.Minute), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux:       &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpuQuota: 20000, CpuPeriod: 100000, CpuShares: 102},
	}); err != nil {
		t.Fatalf("UpdateContainerResources (raise): %v", err)
	}
	wantFields(t, "inside after raise", n.inside(t, id, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max"), "134217728", "20000", "100000")
	wantFields(t, "unit after raise", strings.Fields(ssh(t, "cat "+unit+"/memory.max "+unit+"/cpu.max")), "134217728", "20000", "100000")
	if _, err := n.rt.UpdateContainerResources(tctx(t, 2*time.Minute), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux:       &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 48 << 20, CpuQuota: 5000, CpuPeriod: 100000, CpuShares: 102},
	}); err != nil {
		t.Fatalf("UpdateContainerResources (lower): %v", err)
	}
	lowered := []string{"50331648", "5000", "100000"}
	wantFields(t, "inside after lower", n.inside(t, id, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max"), lowered...)
	wantFields(t, "unit after lower", strings.Fields(ssh(t, "cat "+unit+"/memory.max "+unit+"/cpu.max")), lowered...)

	ssh(t, "systemctl daemon-reload")
	wantFields(t, "inside after daemon-reload", n.inside(t, id, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max"), lowered...)
	wantFields(t, "unit after daemon-reload", strings.Fields(ssh(t, "cat "+unit+"/memory.max "+unit+"/cpu.max")), lowered...)

	for _, f := range []string{"cpu.pressure", "memory.pressure", "io.pressure"} {
		if out := ssh(t, "cat "+unit+"/"+f); !strings.HasPrefix(out, "some avg10=") {
			t.Errorf("%s of the unit: %q, want PSI lines", f, out)
		}
	}
	n.wantPSI(t, pod, id, unit)
}

// wantPSI checks PSI where the kubelet reads it, through the CRI, and as
// `crictl stats -o json` shows it on the node. A busy loop under the
// container's 5 % quota is throttled, which the kernel counts as CPU
// stall, so the "some" total is not zero; it must lie between two reads of
// the unit's cpu.pressure taken around the call (kernel µs, CRI ns).
func (n *node) wantPSI(t *testing.T, pod, id, unit string) {
	t.Helper()
	// Its exit status is timeout's; only the stall matters.
	if _, err := n.rt.ExecSync(tctx(t, 2*time.Minute), &runtimeapi.ExecSyncRequest{
		ContainerId: id, Cmd: []string{"timeout", "3", "sh", "-c", "while :; do :; done"}, Timeout: 100,
	}); err != nil {
		t.Fatalf("busy loop in %s: %v", id, err)
	}
	cpuSome := func(dir string) uint64 {
		t.Helper()
		p, err := stats.ParsePressure(ssh(t, "cat "+dir+"/cpu.pressure"))
		if err != nil {
			t.Fatal(err)
		}
		return p.Some.TotalNanos
	}
	before := cpuSome(unit)
	out := ssh(t, "crictl --runtime-endpoint unix:///run/podunit/podunit.sock --timeout 60s stats -o json --id "+id+
		" 2>/tmp/crictl-stats.err || { cat /tmp/crictl-stats.err; exit 1; }")
	after := cpuSome(unit)
	var resp runtimeapi.ListContainerStatsResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || len(resp.Stats) != 1 {
		t.Fatalf("crictl stats -o json: %v, %d stats\n%s", err, len(resp.Stats), out)
	}
	st := resp.Stats[0]
	t.Logf("crictl stats -o json: cpu.psi %v; memory.psi %v; io %v", st.GetCpu().GetPsi(), st.GetMemory().GetPsi(), st.GetIo())
	cpu := st.GetCpu().GetPsi()
	got := cpu.GetSome().GetTotal()
	if got == 0 || got < before || got > after {
		t.Errorf("crictl: cpu some total %d ns; the unit's cpu.pressure said %d, then %d ns", got, before, after)
	}
	// Linux 6.1: every file has a "full" line, cpu's included.
	if cpu.GetFull() == nil || st.GetMemory().GetPsi().GetSome() == nil || st.GetMemory().GetPsi().GetFull() == nil ||
		st.GetIo().GetPsi().GetSome() == nil || st.GetIo().GetPsi().GetFull() == nil || st.GetIo().GetTimestamp() == 0 {
		t.Errorf("crictl stats -o json lacks PSI parts:\n%s", out)
	}

	// The pod's figures are its slice's, the unit's parent. They are not
	// bounded by the container's: the kernel weights each CPU's stall
	// time by the group's non-idle time there, so a parent's total can be
	// lower than a child's (seen here: 26.8 s for the pod, 27.1 s for its
	// container). They are bracketed the same way instead.
	podDir := path.Dir(unit)
	before = cpuSome(podDir)
	ps, err := n.rt.PodSandboxStats(tctx(t, time.Minute), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatalf("PodSandboxStats: %v", err)
	}
	after = cpuSome(podDir)
	l := ps.GetStats().GetLinux()
	t.Logf("PodSandboxStats: cpu.psi %v; memory.psi %v; io %v", l.GetCpu().GetPsi(), l.GetMemory().GetPsi(), l.GetIo())
	if p := l.GetCpu().GetPsi().GetSome().GetTotal(); p == 0 || p < before || p > after {
		t.Errorf("pod cpu some total %d ns; %s/cpu.pressure said %d, then %d ns", p, podDir, before, after)
	}
	if l.GetMemory().GetPsi().GetSome() == nil || l.GetIo().GetPsi().GetSome() == nil || len(l.GetContainers()) != 1 ||
		l.GetContainers()[0].GetIo().GetPsi() == nil {
		t.Errorf("pod stats lack PSI: %v", l)
	}
}

// A container that allocates past its memory limit is OOM-killed by the
// kernel, and ContainerStatus says OOMKilled (systemd's Result=oom-kill or
// memory.events, read by the exit recorder).
func TestNodeOOMKilled(t *testing.T) {
	n := criNode(t)
	pod, pcfg := n.pod(t, "oom")
	id := n.start(t, pod, pcfg, "hog", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20, MemorySwapLimitInBytes: 32 << 20},
		"sh", "-c", "tail /dev/zero")
	deadline := time.Now().Add(4 * time.Minute)
	for {
		st, err := n.rt.ContainerStatus(tctx(t, time.Minute), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Status; s.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			if s.Reason != "OOMKilled" || s.ExitCode != 137 {
				t.Fatalf("exited with %d, reason %q; want 137 OOMKilled", s.ExitCode, s.Reason)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the memory hog is still running")
		}
		time.Sleep(2 * time.Second)
	}
}

// unitState is what must not change about a running container's unit while
// the package goes away and comes back: its main PID and when it started.
func unitState(t *testing.T, id string) string {
	t.Helper()
	return strings.Join(strings.Fields(ssh(t, "systemctl show -p ActiveState -p MainPID -p ExecMainStartTimestampMonotonic podunit-ctr-"+id+".service")), " ")
}

func (n *node) wantRunning(t *testing.T, id, when string) {
	t.Helper()
	var st *runtimeapi.ContainerStatusResponse
	var err error
	for i := 0; i < 60; i++ { // podunit may still be coming up after dpkg
		if st, err = n.rt.ContainerStatus(tctx(t, time.Minute), &runtimeapi.ContainerStatusRequest{ContainerId: id}); err == nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if err != nil {
		t.Fatalf("%s: ContainerStatus: %v", when, err)
	}
	if st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("%s: container is %v", when, st.Status.State)
	}
}

// Removing the package (apt-get remove), installing it again and
// upgrading it to a newer version, all with a container running: the
// container's unit is never restarted, podunit knows it again each time,
// and the state under /var/lib/podunit is kept.
func TestNodePackageRemoveReinstallUpgrade(t *testing.T) {
	n := criNode(t)
	pod, pcfg := n.pod(t, "pkg")
	id := n.start(t, pod, pcfg, "survivor", nil, "sleep", "3600")
	before := unitState(t, id)
	if !strings.Contains(before, "ActiveState=active") || strings.Contains(before, "MainPID=0") {
		t.Fatalf("container unit: %q", before)
	}

	ssh(t, "DEBIAN_FRONTEND=noninteractive apt-get remove -y podunit >/dev/null 2>&1")
	if st := strings.TrimSpace(ssh(t, "dpkg-query -W -f '${Status}' podunit 2>/dev/null || true")); strings.HasPrefix(st, "install ok installed") {
		t.Fatalf("podunit still installed after apt-get remove: %q", st)
	}
	if got := unitState(t, id); got != before {
		t.Fatalf("apt-get remove touched the container: %q, was %q", got, before)
	}
	if out := ssh(t, "test -d /var/lib/podunit/containers/"+id+" && echo kept"); strings.TrimSpace(out) != "kept" {
		t.Fatalf("remove dropped the container's state")
	}

	ssh(t, "DEBIAN_FRONTEND=noninteractive dpkg -i /opt/podunit-vm/podunit_*.deb >/dev/null")
	n.wantRunning(t, id, "after reinstall")
	if got := unitState(t, id); got != before {
		t.Fatalf("reinstall touched the container: %q, was %q", got, before)
	}

	// the same package with a newer version: dpkg runs the upgrade path
	// (prerm upgrade, postinst configure OLD: podunit.service restarted).
	// Repacked uncompressed: dpkg-deb's default xz over ~100 MB of
	// binaries is CPU work the emulated guest does slowly.
	ssh(t, `set -e; d=$(mktemp -d); dpkg-deb -R /opt/podunit-vm/podunit_*.deb $d/p
		sed -i 's/^Version: .*/Version: 99.0.0+vmupgrade/' $d/p/DEBIAN/control
		dpkg-deb -Znone -b $d/p $d/podunit_upgrade.deb >/dev/null
		DEBIAN_FRONTEND=noninteractive dpkg -i $d/podunit_upgrade.deb >/dev/null; rm -rf $d`)
	if v := strings.TrimSpace(ssh(t, "dpkg-query -W -f '${Version}' podunit")); v != "99.0.0+vmupgrade" {
		t.Fatalf("after the upgrade dpkg has version %q", v)
	}
	n.wantRunning(t, id, "after upgrade")
	if got := unitState(t, id); got != before {
		t.Fatalf("upgrade touched the container: %q, was %q", got, before)
	}
	if st := strings.TrimSpace(ssh(t, "systemctl is-active podunit.service podunit.socket | tr '\\n' ' '")); st != "active active" {
		t.Fatalf("after the upgrade: podunit.service podunit.socket %q", st)
	}
}
