//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cycle is one pod's whole life: run, create+start a container, stop,
// remove.
func (e *Env) cycle(ctx context.Context, name string) error {
	pod, ctr, err := e.RunContainer(ctx, name)
	if err != nil {
		return err
	}
	if _, err := e.P.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr, Timeout: 2}); err != nil {
		return fmt.Errorf("stop container: %w", err)
	}
	if _, err := e.P.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr}); err != nil {
		return fmt.Errorf("remove container: %w", err)
	}
	if _, err := e.P.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		return fmt.Errorf("stop pod: %w", err)
	}
	if _, err := e.P.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		return fmt.Errorf("remove pod: %w", err)
	}
	return nil
}

// settledRSS waits for podunit's heap to be given back (the Go scavenger
// returns freed pages in the background) and returns the lowest RSS seen.
func (e *Env) settledRSS(d time.Duration) int {
	low := e.RSS()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		low = min(low, e.RSS())
	}
	return low
}

// TestChurn runs N pod lives one after another (100; 1000 with
// PODUNIT_LONG=1 or PODUNIT_CHURN=N) and checks that nothing is left —
// units, mounts, netns pins, CNI IPs, storage containers, cgroups, records
// — and that podunit's RSS is back within 10% of its baseline, taken after
// a warm-up (first-use allocations: CNI config cache, gRPC buffers).
func TestChurn(t *testing.T) {
	n := 100
	if Long() {
		n = 1000
	}
	if s := os.Getenv("PODUNIT_CHURN"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	e := StartEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	for i := 0; i < 10; i++ {
		if err := e.cycle(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
			t.Fatalf("warm-up %d: %v", i, err)
		}
	}
	base := e.settledRSS(5 * time.Second)
	start := time.Now()
	peak := base
	for i := 0; i < n; i++ {
		if err := e.cycle(ctx, fmt.Sprintf("churn-%d", i)); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if i%50 == 0 {
			peak = max(peak, e.RSS())
		}
	}
	took := time.Since(start)
	after := e.settledRSS(10 * time.Second)
	t.Logf("churn: %d cycles in %s (%s per pod life); podunit RSS baseline %d KiB, peak %d KiB, after %d KiB (%+.1f%%)",
		n, took.Round(time.Second), (took / time.Duration(n)).Round(time.Millisecond), base, peak, after,
		100*float64(after-base)/float64(base))
	s, err := e.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := s.Empty(); len(left) > 0 {
		t.Errorf("left after %d cycles:\n  %s", n, strings.Join(left, "\n  "))
	}
	if float64(after) > 1.1*float64(base) {
		t.Errorf("podunit RSS %d KiB after %d cycles, more than 10%% above the baseline %d KiB", after, n, base)
	}
}

// TestLoad200 starts 200 pods with one container each, 50 CRI calls in
// flight, and checks every container runs and no call timed out (D-Bus or
// otherwise). A benchmark, not a timed test: it logs the wall time and
// the CPU the harness' systemd (PID 1) used, for docs/robustness.md. About
// a minute on two cores, so it runs in CI; PODUNIT_LOAD=N sets the pods.
func TestLoad200(t *testing.T) {
	pods, inflight := 200, 50
	if s := os.Getenv("PODUNIT_LOAD"); s != "" {
		pods, _ = strconv.Atoi(s)
	}
	e := StartEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cpu0, rss0 := e.PID1CPU(), e.RSS()
	start := time.Now()
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, inflight)
		mu       sync.Mutex
		failures []string
		timeouts atomic.Int32
	)
	for i := 0; i < pods; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, _, err := e.RunContainer(ctx, fmt.Sprintf("load-%d", i)); err != nil {
				if c := status.Code(err); c == codes.DeadlineExceeded || c == codes.Unavailable || strings.Contains(err.Error(), "imeout") {
					timeouts.Add(1)
				}
				mu.Lock()
				failures = append(failures, fmt.Sprintf("load-%d: %v", i, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	cpu := e.PID1CPU() - cpu0
	rss := e.RSS()
	s := e.CheckInvariants(ctx, "after the load")
	running := 0
	for _, st := range s.Containers {
		if st == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running++
		}
	}
	t.Logf("load: %d pods x 1 container, %d in flight: all started in %s; PID 1 CPU %s (%.0f%% of one core); "+
		"podunit RSS %d -> %d KiB; %d running, %d failures, %d timeouts",
		pods, inflight, took.Round(100*time.Millisecond), cpu.Round(10*time.Millisecond),
		100*cpu.Seconds()/took.Seconds(), rss0, rss, running, len(failures), timeouts.Load())
	for _, f := range failures {
		t.Error(f)
	}
	if running != pods {
		t.Errorf("%d of %d containers running", running, pods)
	}
	// tear down as concurrently as it came up, then nothing may be left
	start = time.Now()
	var rm sync.WaitGroup
	for id := range s.Pods {
		rm.Add(1)
		sem <- struct{}{}
		go func() {
			defer rm.Done()
			defer func() { <-sem }()
			if _, err := e.P.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Errorf("stop pod %s: %v", id, err)
				return
			}
			if _, err := e.P.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Errorf("remove pod %s: %v", id, err)
			}
		}()
	}
	rm.Wait()
	t.Logf("load: %d pods stopped and removed in %s", len(s.Pods), time.Since(start).Round(100*time.Millisecond))
	after, err := e.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := after.Empty(); len(left) > 0 {
		t.Errorf("left after removing the load:\n  %s", strings.Join(left, "\n  "))
	}
}
