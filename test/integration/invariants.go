//go:build integration

// Package integration holds cross-cutting integration tests: podunit as a
// whole, booted in test/harness and driven over CRI. This file has what the
// fault, churn, load, malformed-request and security tests share: an
// environment with an image, pod and container builders, and the checker
// of podunit's "nothing without an owner" invariants.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/procstat"
	"github.com/podunit/podunit/test/harness"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestImage is the image every test container runs: busybox from the
// local test registry (test/critest/images.sh), reached through the
// registries.conf of the critest kit.
const TestImage = "registry.k8s.io/e2e-test-images/busybox:1.29-2"

const testRegistry = "127.0.0.1:5000"

// Long reports whether the long variants were asked for (PODUNIT_LONG=1).
func Long() bool { return os.Getenv("PODUNIT_LONG") == "1" }

// Env is one harness with podunit running in it, the test image pulled.
type Env struct {
	T testing.TB
	H *harness.Harness
	P *harness.Podunit
	// SystemdPID is the host PID of the harness' systemd (PID 1 inside).
	SystemdPID int
	regStop    func()
	// pid is podunit's host PID, looked up once per start: scanning /proc
	// at kill time would move the kill by tens of milliseconds.
	pid int
	// config is what podunit was started with (and restarts with).
	config string
}

// StartEnv boots a harness with its own network namespace, makes the test
// registry reachable on its 127.0.0.1:5000, starts podunit and pulls
// TestImage. The harness' own netns keeps the test CNI bridge and its
// iptables rules off the host, so the tests can run beside critest.
func StartEnv(t testing.TB) *Env { t.Helper(); return StartEnvWith(t, "") }

// StartEnvWith is StartEnv with extra TOML appended to the test
// configuration (e.g. a [runtime] table).
func StartEnvWith(t testing.TB, extraTOML string) *Env {
	t.Helper()
	ensureRegistry(t)
	h := harness.Start(t, harness.Options{})
	e := &Env{T: t, H: h}
	b, err := os.ReadFile(filepath.Join(h.Dir, "systemd.pid"))
	if err != nil {
		t.Fatalf("harness systemd pid: %v", err)
	}
	if e.SystemdPID, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		t.Fatalf("harness systemd pid %q: %v", b, err)
	}
	stop, err := forwardIntoNetns(e.SystemdPID, testRegistry, testRegistry)
	if err != nil {
		t.Fatalf("registry forwarder: %v", err)
	}
	e.regStop = stop
	t.Cleanup(stop)
	e.config = h.TestConfig() + extraTOML
	e.P = h.StartPodunit(e.config)
	e.pid = e.PodunitPID()
	ctx := harness.Context(t, 2*time.Minute)
	if _, err := e.P.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: TestImage}}); err != nil {
		t.Fatalf("pull %s: %v", TestImage, err)
	}
	return e
}

// Restart starts podunit again after it was killed or stopped.
func (e *Env) Restart() {
	e.T.Helper()
	if err := e.H.WaitUnitGone(harness.UnitName, 30*time.Second); err != nil {
		e.T.Fatal(err)
	}
	e.P = e.H.StartPodunit(e.config)
	e.pid = e.PodunitPID()
}

// PodunitPID is the host PID of podunit's main process, 0 if none.
func (e *Env) PodunitPID() int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	bin := harness.Binary(e.T)
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("/"+e.H.Name+"/")) || !bytes.Contains(b, []byte("/"+harness.UnitName+"\n")) {
			continue
		}
		dir := filepath.Dir(p)
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		argv := strings.Split(string(cmd), "\x00")
		if len(argv) > 1 && argv[0] == bin && argv[1] == "serve" {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			return pid
		}
	}
	return 0
}

// KillPodunit SIGKILLs podunit's main process from the host (no D-Bus or
// harness exec in between, so the moment is precise).
func (e *Env) KillPodunit() error {
	if e.pid == 0 {
		return fmt.Errorf("podunit has no main process")
	}
	return unix.Kill(e.pid, unix.SIGKILL)
}

// RSS is podunit's resident set size in KiB.
func (e *Env) RSS() int {
	pid := e.PodunitPID()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// MountNSDir holds the pin of podunit's mount namespace inside the harness
// (mountns.Pin of the default run dir).
const MountNSDir = "/run/podunit/mntns"

// MountNSPinned reports whether podunit's mount namespace is pinned in
// the harness.
func (e *Env) MountNSPinned() bool {
	var fs unix.Statfs_t
	return unix.Statfs(e.Inside(MountNSDir+"/mnt"), &fs) == nil && fs.Type == unix.NSFS_MAGIC
}

// NamespaceMountinfo is the mount table of podunit's mount namespace, ""
// when there is none (runtime.private_mount_namespace off).
func (e *Env) NamespaceMountinfo() (string, error) {
	if !e.MountNSPinned() {
		return "", nil
	}
	out, err := e.H.Exec("nsenter", "--mount="+MountNSDir+"/mnt", "cat", "/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("mountinfo of podunit's namespace: %v\n%s", err, out)
	}
	return out, nil
}

// PID1Mounts is the number of mounts in the harness' systemd's table.
func (e *Env) PID1Mounts() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", e.SystemdPID))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// PID1CPU is the CPU time the harness' systemd has used so far.
func (e *Env) PID1CPU() time.Duration {
	st, err := procstat.Read("/proc", e.SystemdPID)
	if err != nil {
		return 0
	}
	return time.Duration(st.UTime+st.STime) * time.Second / 100 // USER_HZ
}

// Inside maps a path inside the harness to the host through its
// systemd's root (the harness' mount namespace).
func (e *Env) Inside(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", e.SystemdPID, p)
}

// PodConfig is a pod in the harness' CNI network with a log directory.
func PodConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "itest", Uid: "uid-" + name},
		Hostname:     name,
		LogDirectory: filepath.Join(harness.PodLogDirInside, "itest_"+name),
		Labels:       map[string]string{"itest": "1"},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
}

// ContainerConfig runs a shell that exits 0 on SIGTERM at once.
func ContainerConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: TestImage},
		Command:  []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
		LogPath:  name + ".log",
		Labels:   map[string]string{"itest": "1"},
	}
}

// RunContainer runs a pod with one started container and returns both IDs.
func (e *Env) RunContainer(ctx context.Context, name string) (pod, ctr string, err error) {
	pc := PodConfig(name)
	r, err := e.P.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
	if err != nil {
		return "", "", fmt.Errorf("run pod %s: %w", name, err)
	}
	c, err := e.P.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: r.PodSandboxId, Config: ContainerConfig(name), SandboxConfig: pc})
	if err != nil {
		return r.PodSandboxId, "", fmt.Errorf("create container in %s: %w", name, err)
	}
	if _, err := e.P.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		return r.PodSandboxId, c.ContainerId, fmt.Errorf("start container in %s: %w", name, err)
	}
	return r.PodSandboxId, c.ContainerId, nil
}

// RemoveAllPods removes every pod (and with them their containers).
func (e *Env) RemoveAllPods(ctx context.Context) error {
	l, err := e.P.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	for _, p := range l.Items {
		if _, err := e.P.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			return fmt.Errorf("stop pod %s: %w", p.Id, err)
		}
		if _, err := e.P.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			return fmt.Errorf("remove pod %s: %w", p.Id, err)
		}
	}
	return nil
}

// Snapshot is what podunit owns on the node, seen from outside podunit.
type Snapshot struct {
	Pods       map[string]runtimeapi.PodSandboxState // CRI view
	Containers map[string]runtimeapi.ContainerState  // CRI view
	// Units are podunit-* units systemd has loaded, with their ActiveState.
	Units map[string]string
	// Mounts are mount points below /run/podunit and the image store's
	// container mounts.
	Mounts []string
	// CNIIPs are host-local allocations: IP -> owning pod (CNI container ID).
	CNIIPs map[string]string
	// StorageContainers are the image store's container IDs.
	StorageContainers []string
	// Cgroups are directories below podunit.slice: in the systemd
	// hierarchy (v2: the unified one) as "<path>", in every other v1
	// hierarchy as "<hierarchy>:<path>" (the OCI runtime creates the
	// container's path in each; systemd removes it only in its own).
	Cgroups []string
	// Records are podunit's state records: "pod/<id>", "ctr/<id>".
	Records []string
	// Trash are removed containers whose files the reaper has not deleted
	// yet (docs/containers.md "Deferred removal"): "state/<id>" in the
	// state dir's trash, "run/<id>" in the run dir's.
	Trash []string
}

// settleTimeout bounds Take's wait for the deferred deletions of removed
// containers (a removal of a few hundred pods leaves a backlog of about
// 10 ms each).
const settleTimeout = 30 * time.Second

// trashDirs are podunit's trash directories for removed containers.
func (e *Env) trashDirs() map[string]string {
	return map[string]string{
		"state": filepath.Join(e.H.StateDir, "containers", ".trash"),
		"run":   filepath.Join(e.H.RunDir(), "podunit", "containers", ".trash"),
	}
}

func (e *Env) trash() []string {
	var out []string
	for kind, d := range e.trashDirs() {
		ents, _ := os.ReadDir(d)
		for _, x := range ents {
			out = append(out, kind+"/"+x.Name())
		}
	}
	sort.Strings(out)
	return out
}

// settleRemovals waits, up to settleTimeout, until podunit's reaper has
// deleted the files of every container removed so far: RemoveContainer
// returns before storage's container and the directories are gone. A
// reaper that never gets there (podunit down, a deletion failing) leaves
// Snapshot.Trash and the storage containers to be reported.
func (e *Env) settleRemovals(ctx context.Context) {
	deadline := time.Now().Add(settleTimeout)
	for len(e.trash()) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
}

// Take reads the CRI lists and the node's state, once removed containers'
// deferred deletions are done (settleRemovals).
func (e *Env) Take(ctx context.Context) (*Snapshot, error) {
	e.settleRemovals(ctx)
	s := &Snapshot{Pods: map[string]runtimeapi.PodSandboxState{}, Containers: map[string]runtimeapi.ContainerState{},
		Units: map[string]string{}, CNIIPs: map[string]string{}}
	pl, err := e.P.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	for _, p := range pl.Items {
		s.Pods[p.Id] = p.State
	}
	cl, err := e.P.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListContainers: %w", err)
	}
	for _, c := range cl.Containers {
		s.Containers[c.Id] = c.State
	}
	return s, e.takeNode(s)
}

func (e *Env) takeNode(s *Snapshot) error {
	out, err := e.H.Exec("systemctl", "list-units", "--all", "--plain", "--no-legend", "--full",
		"podunit-ctr-*", "podunit-pod-*", "podunit.slice")
	if err != nil {
		return fmt.Errorf("list units: %v\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 4 {
			s.Units[f[0]] = f[2]
		}
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", e.SystemdPID))
	if err != nil {
		return err
	}
	// podunit's own mount namespace (runtime.private_mount_namespace)
	// holds its mounts; it is a slave copy of PID 1's, so a mount seen in
	// both counts once.
	ns, err := e.NamespaceMountinfo()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(string(mi)+"\n"+ns, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || seen[f[4]] || f[4] == MountNSDir || strings.HasPrefix(f[4], MountNSDir+"/") {
			continue // the namespace's pin is meant to stay
		}
		if strings.HasPrefix(f[4], "/run/podunit/") || strings.HasPrefix(f[4], harness.StateDirInside+"/storage/overlay/") {
			seen[f[4]] = true
			s.Mounts = append(s.Mounts, f[4])
		}
	}
	ipam := e.Inside("/var/lib/cni/networks/podunit-test")
	if ents, err := os.ReadDir(ipam); err == nil {
		for _, d := range ents {
			if net.ParseIP(d.Name()) == nil {
				continue // last_reserved_ip.0, lock
			}
			b, _ := os.ReadFile(filepath.Join(ipam, d.Name()))
			s.CNIIPs[d.Name()] = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
		}
	}
	s.StorageContainers = storageContainers(filepath.Join(e.H.StateDir, "storage"), filepath.Join(e.H.RunDir(), "podunit", "storage"))
	hiers := map[string]string{"": e.Inside("/sys/fs/cgroup/podunit.slice")}
	if ents, err := os.ReadDir(e.Inside("/sys/fs/cgroup")); err == nil {
		if _, err := os.Stat(e.Inside("/sys/fs/cgroup/systemd")); err == nil {
			hiers = map[string]string{}
			for _, d := range ents {
				if d.IsDir() && d.Name() != "unified" { // symlinks: cpu -> cpu,cpuacct
					hiers[d.Name()] = e.Inside("/sys/fs/cgroup/" + d.Name() + "/podunit.slice")
				}
			}
		}
	}
	for h, cg := range hiers {
		prefix := h + ":"
		if h == "" || h == "systemd" {
			prefix = ""
		}
		_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != cg {
				s.Cgroups = append(s.Cgroups, prefix+strings.TrimPrefix(p, cg+"/"))
			}
			return nil
		})
	}
	sort.Strings(s.Cgroups)
	if ents, err := os.ReadDir(filepath.Join(e.H.StateDir, "sandboxes")); err == nil {
		for _, d := range ents {
			s.Records = append(s.Records, "pod/"+strings.TrimSuffix(d.Name(), ".json"))
		}
	}
	if ents, err := os.ReadDir(filepath.Join(e.H.StateDir, "containers")); err == nil {
		for _, d := range ents {
			if d.Name() != ".trash" {
				s.Records = append(s.Records, "ctr/"+d.Name())
			}
		}
	}
	s.Trash = e.trash()
	sort.Strings(s.Mounts)
	return nil
}

// storageContainers reads the IDs of the image store's containers from
// every file go.podman.io/storage may keep them in, one set per graph
// driver: containers.json and volatile-containers.json under the graph
// root, and volatile-containers.json under the run root (the transient
// store, image.storage_transient).
func storageContainers(root, runRoot string) []string {
	var files []string
	for _, pattern := range []string{
		filepath.Join(root, "*-containers", "containers.json"),
		filepath.Join(root, "*-containers", "volatile-containers.json"),
		filepath.Join(runRoot, "*-containers", "volatile-containers.json"),
	} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	var ids []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// [{"id":"...", ...}, ...]: only the ids matter here
		for _, part := range strings.Split(string(b), `"id":"`)[1:] {
			if i := strings.IndexByte(part, '"'); i > 0 {
				ids = append(ids, part[:i])
			}
		}
	}
	return ids
}

// Violations checks the invariants: every listed container has a unit or a
// recorded exit; nothing (unit, mount, netns pin, CNI IP, storage
// container, cgroup, record) exists without a listed owner.
func (s *Snapshot) Violations() []string {
	var v []string
	bad := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }
	pod := func(id string) bool { _, ok := s.Pods[id]; return ok }
	ctr := func(id string) bool { _, ok := s.Containers[id]; return ok }
	for id, st := range s.Containers {
		unit := "podunit-ctr-" + id + ".service"
		// "deactivating": a stop that podunit started before it was killed
		// is still running in systemd; the container is alive until it ends.
		if st == runtimeapi.ContainerState_CONTAINER_RUNNING && s.Units[unit] != "active" && s.Units[unit] != "deactivating" {
			bad("container %s is RUNNING but its unit is %q", short(id), s.Units[unit])
		}
		if st == runtimeapi.ContainerState_CONTAINER_UNKNOWN {
			bad("container %s is UNKNOWN", short(id))
		}
	}
	for u, active := range s.Units {
		switch {
		case strings.HasPrefix(u, "podunit-ctr-"):
			id := strings.TrimSuffix(strings.TrimPrefix(u, "podunit-ctr-"), ".service")
			if !ctr(id) {
				bad("unit %s (%s) has no container", u, active)
			} else if active == "active" && s.Containers[id] != runtimeapi.ContainerState_CONTAINER_RUNNING {
				bad("unit %s is active but its container is %s", u, s.Containers[id])
			}
		case strings.HasPrefix(u, "podunit-pod-"):
			id := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(u, "podunit-pod-"), ".slice"), "-init.service")
			if !pod(id) && active != "inactive" {
				bad("unit %s (%s) has no pod", u, active)
			}
		}
	}
	for _, m := range s.Mounts {
		rel, ok := strings.CutPrefix(m, "/run/podunit/")
		if !ok {
			continue // storage mounts are checked by count below
		}
		parts := strings.Split(rel, "/")
		if len(parts) < 2 {
			bad("mount %s directly in the run dir", m)
			continue
		}
		switch parts[0] {
		case "netns", "utsns", "ipcns", "pidns", "userns", "sandboxes":
			if !pod(parts[1]) {
				bad("mount %s has no pod", m)
			}
		case "containers":
			if !ctr(parts[1]) {
				bad("mount %s has no container", m)
			}
		case "storage":
			// the image store's own run root (overlay layer mounts): checked below
		default:
			bad("mount %s is not one podunit should have", m)
		}
	}
	var overlays int
	for _, m := range s.Mounts {
		if strings.HasSuffix(m, "/merged") {
			overlays++
		}
	}
	if overlays > len(s.Containers) {
		bad("%d overlay rootfs mounts for %d containers: %q", overlays, len(s.Containers), s.Mounts)
	}
	for ip, owner := range s.CNIIPs {
		if !pod(owner) {
			bad("CNI IP %s is allocated to %q, which is no pod", ip, short(owner))
		}
	}
	for _, id := range s.StorageContainers {
		if !ctr(id) {
			bad("storage container %s has no container", short(id))
		}
	}
	for _, c := range s.Cgroups {
		leaf := filepath.Base(c)
		if id, ok := strings.CutPrefix(leaf, "podunit-pod-"); ok && strings.HasSuffix(leaf, ".slice") {
			if id = strings.TrimSuffix(id, ".slice"); !pod(id) {
				bad("cgroup %s has no pod", c)
			}
		}
		if id, ok := strings.CutPrefix(leaf, "podunit-ctr-"); ok {
			if id = strings.TrimSuffix(id, ".service"); !ctr(id) {
				bad("cgroup %s has no container", c)
			}
		}
	}
	for _, r := range s.Records {
		kind, id, _ := strings.Cut(r, "/")
		if (kind == "pod" && !pod(id)) || (kind == "ctr" && !ctr(id)) {
			bad("state record %s has no listed owner", r)
		}
	}
	sort.Strings(v)
	return v
}

// Empty lists whatever remains of pods and containers (for leak checks
// after everything was removed).
func (s *Snapshot) Empty() []string {
	var v []string
	if len(s.Pods)+len(s.Containers) > 0 {
		v = append(v, fmt.Sprintf("%d pods and %d containers listed", len(s.Pods), len(s.Containers)))
	}
	for u, st := range s.Units {
		if u != "podunit.slice" {
			v = append(v, "unit "+u+" ("+st+")")
		}
	}
	for _, m := range s.Mounts {
		if !strings.HasPrefix(m, "/run/podunit/storage") {
			v = append(v, "mount "+m)
		}
	}
	for ip := range s.CNIIPs {
		v = append(v, "CNI IP "+ip)
	}
	for _, c := range s.StorageContainers {
		v = append(v, "storage container "+short(c))
	}
	for _, c := range s.Cgroups {
		// podunit-pod.slice is systemd's implicit parent of every
		// podunit-pod-<id>.slice (a dash nests slices); it is no pod's
		if _, path, ok := strings.Cut(c, ":"); !ok && c != "podunit-pod.slice" || ok && path != "podunit-pod.slice" {
			v = append(v, "cgroup "+c)
		}
	}
	for _, r := range s.Records {
		v = append(v, "record "+r)
	}
	for _, r := range s.Trash {
		v = append(v, "trash entry "+r+" (deferred removal not finished)")
	}
	return v
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// CheckInvariants fails the test with every violation found.
func (e *Env) CheckInvariants(ctx context.Context, what string) *Snapshot {
	e.T.Helper()
	s, err := e.Take(ctx)
	if err != nil {
		e.T.Fatalf("%s: %v", what, err)
	}
	v := s.Violations()
	// an EXITED container's exit is recorded: a finish time and a reason
	for id, st := range s.Containers {
		if st != runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		cs, err := e.P.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			v = append(v, fmt.Sprintf("container %s: status: %v", short(id), err))
		} else if cs.GetStatus().GetFinishedAt() == 0 || cs.GetStatus().GetReason() == "" {
			v = append(v, fmt.Sprintf("container %s is EXITED without a recorded exit: finished %d, reason %q",
				short(id), cs.GetStatus().GetFinishedAt(), cs.GetStatus().GetReason()))
		}
	}
	if len(v) > 0 {
		e.T.Fatalf("%s: invariants violated:\n  %s", what, strings.Join(v, "\n  "))
	}
	return s
}

// registryUp reports whether the test registry answers and holds TestImage.
func registryUp() bool {
	c := http1Get("http://" + testRegistry + "/v2/e2e-test-images/busybox/tags/list")
	return strings.Contains(c, "1.29-2")
}

func http1Get(url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "curl", "-fsS", url).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

var registryOnce sync.Once

// ensureRegistry starts the local registry and pushes the critest images
// when they are not there yet (a fresh CI machine runs the integration
// stage before critest). The registry is left running for critest, which
// starts it the same way.
func ensureRegistry(t testing.TB) {
	t.Helper()
	registryOnce.Do(func() {
		if registryUp() {
			return
		}
		repo, err := harness.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		kit := filepath.Join(repo, "test", "critest")
		for _, script := range []string{"registry.sh start", "images.sh"} {
			argv := strings.Fields(script)
			cmd := exec.Command("bash", append([]string{filepath.Join(kit, argv[0])}, argv[1:]...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("%s: %v\n%s", script, err, tail(out, 30))
			}
		}
	})
	if !registryUp() {
		t.Fatalf("the test registry on %s does not serve %s (test/critest/images.sh)", testRegistry, TestImage)
	}
}

func tail(b []byte, n int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// forwardIntoNetns listens on listen inside the network namespace of pid
// and relays every connection to target in the host's: the harness gets
// the host's registry without sharing the host's network.
func forwardIntoNetns(pid int, listen, target string) (func(), error) {
	type res struct {
		l   net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// This thread enters the namespace and is never returned to the
		// pool (no UnlockOSThread): the runtime then ends it.
		runtime.LockOSThread()
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{err: fmt.Errorf("setns: %w", err)}
			return
		}
		l, err := net.Listen("tcp", listen)
		ch <- res{l, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := r.l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				u, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { r.l.Close() }) }, nil
}

// lines is a small helper for command output.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}
