//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/test/harness"
)

// overlayRootfs counts the image store's overlay mounts (container root
// filesystems) in a mount table.
func overlayRootfs(mountinfo string) int {
	n := 0
	for _, l := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], harness.StateDirInside+"/storage/overlay/") && strings.HasSuffix(f[4], "/merged") {
			n++
		}
	}
	return n
}

func (e *Env) pid1Mountinfo() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", e.SystemdPID))
	if err != nil {
		e.T.Fatal(err)
	}
	return string(b)
}

func (e *Env) pinInode() uint64 {
	var st unix.Stat_t
	if err := unix.Stat(e.Inside(MountNSDir+"/mnt"), &st); err != nil {
		e.T.Fatal(err)
	}
	return st.Ino
}

// TestPrivateMountNamespace: with runtime.private_mount_namespace (the
// default) a running container's root filesystem is mounted in podunit's
// namespace and not in PID 1's table; the container works, a SIGKILLed
// podunit comes back into the same namespace and still serves it, and
// after removal nothing is left in either table (the pin stays).
func TestPrivateMountNamespace(t *testing.T) {
	e := StartEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if !e.MountNSPinned() {
		t.Fatalf("no mount namespace pinned at %s", MountNSDir+"/mnt")
	}
	pin := e.pinInode()
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", e.PodunitPID())); err != nil || ns != fmt.Sprintf("mnt:[%d]", pin) {
		t.Fatalf("podunit runs in mount namespace %q (%v), want the pinned mnt:[%d]", ns, err, pin)
	}
	base := overlayRootfs(e.pid1Mountinfo())
	_, ctr, err := e.RunContainer(ctx, "mntns")
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		r, err := e.P.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr, Cmd: []string{"sh", "-c", "echo ok > /probe && cat /probe"}, Timeout: 20})
		if err != nil || string(r.GetStdout()) != "ok\n" {
			t.Fatalf("%s: exec in the container: %v %q %q", when, err, r.GetStdout(), r.GetStderr())
		}
		ns, err := e.NamespaceMountinfo()
		if err != nil {
			t.Fatal(err)
		}
		if n := overlayRootfs(ns); n != 1 {
			t.Fatalf("%s: %d overlay root filesystems in podunit's namespace, want 1", when, n)
		}
		if n := overlayRootfs(e.pid1Mountinfo()); n != base {
			t.Fatalf("%s: %d overlay root filesystems in PID 1's mount table, want %d", when, n, base)
		}
		if strings.Contains(e.pid1Mountinfo(), "/run/podunit/containers/") || strings.Contains(e.pid1Mountinfo(), "/run/podunit/netns/") {
			t.Fatalf("%s: podunit's mounts in PID 1's table:\n%s", when, e.pid1Mountinfo())
		}
		// the container's init runs in a mount namespace cloned from
		// podunit's, never from PID 1's: runc ran inside
		st, err := e.P.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
		if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("%s: container status %v, %v", when, st.GetStatus().GetState(), err)
		}
	}
	check("running")
	if err := e.KillPodunit(); err != nil {
		t.Fatal(err)
	}
	e.Restart()
	if got := e.pinInode(); got != pin {
		t.Fatalf("after a SIGKILL and start the pin holds namespace %d, want %d", got, pin)
	}
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", e.PodunitPID())); err != nil || ns != fmt.Sprintf("mnt:[%d]", pin) {
		t.Fatalf("restarted podunit runs in mount namespace %q (%v), want mnt:[%d]", ns, err, pin)
	}
	check("after kill -9 and restart")
	if err := e.RemoveAllPods(ctx); err != nil {
		t.Fatal(err)
	}
	s := e.CheckInvariants(ctx, "after removal")
	if left := s.Empty(); len(left) > 0 {
		t.Fatalf("left after removal: %q", left)
	}
	ns, err := e.NamespaceMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	if n := overlayRootfs(ns); n != 0 {
		t.Fatalf("%d overlay root filesystems left in podunit's namespace", n)
	}
}

// TestMountChurnPID1 starts PODUNIT_MNTNS_N containers (100 by default;
// one pod each, 4 calls in flight) and removes them, once with
// runtime.private_mount_namespace off and once on, and logs what the
// harness' systemd (PID 1) spent and how many mounts its table held at
// the peak: the figures of docs/benchmarks.md. A benchmark more than a
// test; it fails only when something fails or leaks.
func TestMountChurnPID1(t *testing.T) {
	n := 100
	if s := os.Getenv("PODUNIT_MNTNS_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("private_mount_namespace=%v", on), func(t *testing.T) {
			e := StartEnvWith(t, fmt.Sprintf("\n[runtime]\nprivate_mount_namespace = %v\n", on))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			if e.MountNSPinned() != on {
				t.Fatalf("namespace pinned: %v, want %v", e.MountNSPinned(), on)
			}
			mounts0, cpu0 := e.PID1Mounts(), e.PID1CPU()
			start := time.Now()
			var (
				wg   sync.WaitGroup
				sem  = make(chan struct{}, 4)
				mu   sync.Mutex
				errs []string
			)
			for i := 0; i < n; i++ {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					if _, _, err := e.RunContainer(ctx, fmt.Sprintf("churn-%d", i)); err != nil {
						mu.Lock()
						errs = append(errs, err.Error())
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("%d of %d failed, first: %s", len(errs), n, errs[0])
			}
			startWall, startCPU, peak := time.Since(start), e.PID1CPU()-cpu0, e.PID1Mounts()
			ns, err := e.NamespaceMountinfo()
			if err != nil {
				t.Fatal(err)
			}
			cpu1 := e.PID1CPU()
			start = time.Now()
			if err := e.RemoveAllPods(ctx); err != nil {
				t.Fatal(err)
			}
			removeWall, removeCPU := time.Since(start), e.PID1CPU()-cpu1
			t.Logf("private_mount_namespace=%v: %d containers started in %.1fs, PID 1 %.2f CPU-s (%.1f ms each); PID 1 mount table %d -> %d lines (podunit's namespace: %d); removed in %.1fs, PID 1 %.2f CPU-s; after: %d lines",
				on, n, startWall.Seconds(), startCPU.Seconds(), float64(startCPU.Milliseconds())/float64(n),
				mounts0, peak, strings.Count(ns, "\n"), removeWall.Seconds(), removeCPU.Seconds(), e.PID1Mounts())
			if left := e.CheckInvariants(ctx, "after removal").Empty(); len(left) > 0 {
				t.Fatalf("left after removal: %q", left)
			}
		})
	}
}
