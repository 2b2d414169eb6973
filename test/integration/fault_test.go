//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// faultOp is one mutating CRI call under kill -9.
type faultOp struct {
	name string
	// prep builds what the call needs and returns its target.
	prep func(ctx context.Context, e *Env, name string) (target, error)
	// call is the call that gets interrupted, and retried.
	call func(ctx context.Context, e *Env, tg target) error
	// settled checks the call's effect after the retry; retryErr is what
	// the retry returned (some calls may answer "already done" then).
	settled func(ctx context.Context, e *Env, tg target, retryErr error) error
}

type target struct {
	name     string
	pod, ctr string
	pc       *runtimeapi.PodSandboxConfig
}

func podByName(ctx context.Context, e *Env, name string) (string, error) {
	l, err := e.P.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return "", err
	}
	var ids []string
	for _, p := range l.Items {
		if p.GetMetadata().GetName() == name {
			ids = append(ids, p.Id)
		}
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("%d pods named %s, want 1", len(ids), name)
	}
	return ids[0], nil
}

func ctrState(ctx context.Context, e *Env, id string) (runtimeapi.ContainerState, error) {
	st, err := e.P.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return 0, err
	}
	return st.GetStatus().GetState(), nil
}

func is(err error, c codes.Code) bool { return status.Code(err) == c }

var faultOps = []faultOp{
	{
		name: "RunPodSandbox",
		prep: func(ctx context.Context, e *Env, name string) (target, error) {
			return target{name: name, pc: PodConfig(name)}, nil
		},
		call: func(ctx context.Context, e *Env, tg target) error {
			_, err := e.P.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: tg.pc})
			return err
		},
		settled: func(ctx context.Context, e *Env, tg target, retryErr error) error {
			if retryErr != nil && !is(retryErr, codes.AlreadyExists) {
				return retryErr
			}
			_, err := podByName(ctx, e, tg.name)
			return err
		},
	},
	{
		name: "CreateContainer",
		prep: func(ctx context.Context, e *Env, name string) (target, error) {
			pc := PodConfig(name)
			r, err := e.P.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
			return target{name: name, pc: pc, pod: r.GetPodSandboxId()}, err
		},
		call: func(ctx context.Context, e *Env, tg target) error {
			_, err := e.P.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
				PodSandboxId: tg.pod, Config: ContainerConfig(tg.name), SandboxConfig: tg.pc})
			return err
		},
		settled: func(ctx context.Context, e *Env, tg target, retryErr error) error {
			if retryErr != nil && !is(retryErr, codes.AlreadyExists) {
				return retryErr
			}
			l, err := e.P.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
				Filter: &runtimeapi.ContainerFilter{PodSandboxId: tg.pod}})
			if err != nil {
				return err
			}
			if len(l.Containers) != 1 || l.Containers[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
				return fmt.Errorf("pod has containers %v, want one CREATED", l.Containers)
			}
			return nil
		},
	},
	{
		name: "StartContainer",
		prep: func(ctx context.Context, e *Env, name string) (target, error) {
			pc := PodConfig(name)
			r, err := e.P.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
			if err != nil {
				return target{}, err
			}
			c, err := e.P.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
				PodSandboxId: r.PodSandboxId, Config: ContainerConfig(name), SandboxConfig: pc})
			return target{name: name, pc: pc, pod: r.PodSandboxId, ctr: c.GetContainerId()}, err
		},
		call: func(ctx context.Context, e *Env, tg target) error {
			_, err := e.P.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: tg.ctr})
			return err
		},
		settled: func(ctx context.Context, e *Env, tg target, retryErr error) error {
			st, err := ctrState(ctx, e, tg.ctr)
			if err != nil {
				return err
			}
			switch {
			case retryErr == nil && st == runtimeapi.ContainerState_CONTAINER_RUNNING:
				return nil
			case is(retryErr, codes.FailedPrecondition) && (st == runtimeapi.ContainerState_CONTAINER_RUNNING || st == runtimeapi.ContainerState_CONTAINER_EXITED):
				// the first start got through (running) or was cut off
				// after the record said running (exited, unknown exit):
				// listable and removable, which the cleanup checks
				return nil
			}
			return fmt.Errorf("retry: %v, state %s", retryErr, st)
		},
	},
	{
		name: "StopContainer",
		prep: runOne,
		call: func(ctx context.Context, e *Env, tg target) error {
			_, err := e.P.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: tg.ctr, Timeout: 2})
			return err
		},
		settled: func(ctx context.Context, e *Env, tg target, retryErr error) error {
			if retryErr != nil {
				return retryErr
			}
			if st, err := ctrState(ctx, e, tg.ctr); err != nil || st != runtimeapi.ContainerState_CONTAINER_EXITED {
				return fmt.Errorf("after stop: state %s, %v", st, err)
			}
			return nil
		},
	},
	{
		name: "RemoveContainer",
		prep: runOne,
		call: func(ctx context.Context, e *Env, tg target) error {
			_, err := e.P.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: tg.ctr})
			return err
		},
		settled: func(ctx context.Context, e *Env, tg target, retryErr error) error {
			if retryErr != nil {
				return retryErr
			}
			if _, err := ctrState(ctx, e, tg.ctr); !is(err, codes.NotFound) {
				return fmt.Errorf("removed container: status %v, want NotFound", err)
			}
			return nil
		},
	},
	{
		name: "StopPodSandbox",
		prep: runOne,
		call: func(ctx context.Context, e *Env, tg target) error {
			_, err := e.P.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: tg.pod})
			return err
		},
		settled: func(ctx context.Context, e *Env, tg target, retryErr error) error {
			if retryErr != nil {
				return retryErr
			}
			st, err := e.P.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: tg.pod})
			if err != nil || st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				return fmt.Errorf("after stop: pod %v, %v", st.GetStatus().GetState(), err)
			}
			if cs, err := ctrState(ctx, e, tg.ctr); err != nil || cs != runtimeapi.ContainerState_CONTAINER_EXITED {
				return fmt.Errorf("after pod stop: container %s, %v", cs, err)
			}
			return nil
		},
	},
	{
		name: "RemovePodSandbox",
		prep: runOne,
		call: func(ctx context.Context, e *Env, tg target) error {
			_, err := e.P.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: tg.pod})
			return err
		},
		settled: func(ctx context.Context, e *Env, tg target, retryErr error) error {
			if retryErr != nil {
				return retryErr
			}
			if _, err := e.P.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: tg.pod}); !is(err, codes.NotFound) {
				return fmt.Errorf("removed pod: status %v, want NotFound", err)
			}
			if _, err := ctrState(ctx, e, tg.ctr); !is(err, codes.NotFound) {
				return fmt.Errorf("removed pod's container: status %v, want NotFound", err)
			}
			return nil
		},
	},
	{
		name: "PullImage",
		prep: func(ctx context.Context, e *Env, name string) (target, error) {
			_, err := e.P.Image.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: TestImage}})
			return target{name: name}, err
		},
		call: func(ctx context.Context, e *Env, tg target) error {
			_, err := e.P.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: TestImage}})
			return err
		},
		settled: func(ctx context.Context, e *Env, tg target, retryErr error) error {
			if retryErr != nil {
				return retryErr
			}
			st, err := e.P.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: TestImage}})
			if err != nil || st.GetImage() == nil {
				return fmt.Errorf("after pull: image status %v, %v", st, err)
			}
			return nil
		},
	},
}

func runOne(ctx context.Context, e *Env, name string) (target, error) {
	pod, ctr, err := e.RunContainer(ctx, name)
	return target{name: name, pod: pod, ctr: ctr}, err
}

// TestKill9FaultInjection SIGKILLs podunit at a random moment during each
// mutating CRI call, restarts it (recovery and the start-up GC run before
// it serves) and checks that nothing is left without an owner, every
// container is consistent with systemd, the interrupted call retried
// succeeds, and everything is still removable without leftovers.
//
// PODUNIT_FAULT_ITERATIONS sets the iterations per call (default 25, so
// 200 in all, about two minutes; 125 with PODUNIT_LONG=1); PODUNIT_FAULT_SEED replays a run.
func TestKill9FaultInjection(t *testing.T) {
	perOp := 25
	if Long() {
		perOp = 125
	}
	if s := os.Getenv("PODUNIT_FAULT_ITERATIONS"); s != "" {
		perOp, _ = strconv.Atoi(s)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PODUNIT_FAULT_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("PODUNIT_FAULT_SEED=%d, %d iterations per call", seed, perOp)
	rng := rand.New(rand.NewPCG(seed, 0))
	e := StartEnv(t)
	start := time.Now()
	total := 0
	for _, op := range faultOps {
		// the kill lands anywhere in [0, est]: 1.5 times the call's
		// uninterrupted duration. Retries do not adjust it: a retry
		// after a kill late in the call has little left to do, and its
		// short duration would pull every later kill to the call's start.
		est := e.calibrate(t, op)
		var completed, interrupted int
		for i := 0; i < perOp; i++ {
			total++
			name := fmt.Sprintf("%s-%d", strings.ToLower(op.name), i)
			delay := time.Duration(rng.Int64N(int64(est)))
			done := e.faultIteration(t, op, name, delay)
			if done {
				completed++
			} else {
				interrupted++
			}
			if t.Failed() {
				t.Fatalf("%s iteration %d (kill after %s) failed; replay with PODUNIT_FAULT_SEED=%d", op.name, i, delay, seed)
			}
		}
		t.Logf("%s: %d iterations, %d interrupted, %d had completed before the kill (kill window ~%s)",
			op.name, perOp, interrupted, completed, est.Round(time.Millisecond))
	}
	t.Logf("%d kill -9 iterations in %s", total, time.Since(start).Round(time.Second))
	// what recovery and the GC had to do, for the record
	if j, err := e.H.Journal("podunit.service"); err == nil {
		seen := map[string]int{}
		for _, l := range lines(j) {
			if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") && !strings.Contains(l, "garbage collected") {
				continue
			}
			if i := strings.Index(l, "msg="); i >= 0 {
				m := l[i+4:]
				if strings.HasPrefix(m, `"`) {
					m = m[1:]
					if k := strings.IndexByte(m, '"'); k >= 0 {
						m = m[:k]
					}
				}
				if c := strings.Index(l, "collector="); c >= 0 {
					m += " " + strings.Fields(l[c:])[0]
				}
				seen[m]++
			}
		}
		keys := make([]string, 0, len(seen))
		for k := range seen {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "  %5d %s\n", seen[k], k)
		}
		t.Logf("podunit's warnings, errors and collections over the run:\n%s", b.String())
	}
}

// calibrate times one uninterrupted call of op.
func (e *Env) calibrate(t *testing.T, op faultOp) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tg, err := op.prep(ctx, e, "calibrate")
	if err != nil {
		t.Fatalf("%s: calibrate: %v", op.name, err)
	}
	t0 := time.Now()
	if err := op.call(ctx, e, tg); err != nil {
		t.Fatalf("%s: calibrate: %v", op.name, err)
	}
	d := time.Since(t0)
	if err := e.RemoveAllPods(ctx); err != nil {
		t.Fatalf("%s: calibrate: %v", op.name, err)
	}
	return max(20*time.Millisecond, d*3/2)
}

// faultIteration runs one kill -9 round and returns whether the
// interrupted call had completed anyway.
func (e *Env) faultIteration(t *testing.T, op faultOp, name string, delay time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tg, err := op.prep(ctx, e, name)
	if err != nil {
		t.Errorf("%s: prepare: %v", name, err)
		return false
	}
	res := make(chan error, 1)
	go func() { res <- op.call(ctx, e, tg) }()
	time.Sleep(delay)
	if err := e.KillPodunit(); err != nil {
		t.Errorf("%s: kill: %v", name, err)
		return false
	}
	callErr := <-res
	done := callErr == nil
	if callErr != nil && !is(callErr, codes.Unavailable) && !is(callErr, codes.Canceled) {
		// a call cut by the kill sees the connection drop; anything
		// else is an answer podunit gave before dying
		t.Logf("%s: interrupted call returned %v", name, callErr)
	}
	e.Restart()
	e.CheckInvariants(ctx, name+" after restart")
	retryErr := op.call(ctx, e, tg)
	if err := op.settled(ctx, e, tg, retryErr); err != nil {
		t.Errorf("%s: retried call: %v", name, err)
		return done
	}
	e.CheckInvariants(ctx, name+" after retry")
	if err := e.RemoveAllPods(ctx); err != nil {
		t.Errorf("%s: cleanup: %v", name, err)
		return done
	}
	s, err := e.Take(ctx)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return done
	}
	if left := s.Empty(); len(left) > 0 {
		t.Errorf("%s: left after removing everything:\n  %s", name, strings.Join(left, "\n  "))
	}
	return done
}
