package podlife

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// world is one pod and its containers, as both fakes see them, with the
// calls in the order they were made.
type world struct {
	mu       sync.Mutex
	calls    []string
	ready    bool
	ctrs     []string
	failCtr  error
	inCreate chan struct{} // closed once a Create has started, if set
	release  chan struct{} // a Create waits for it, if set

	// checkpoint and restore (checkpoint_test.go)
	sharedPID          bool
	list               []*runtimeapi.Container
	frozen             bool
	freezeErr, thawErr error
	failCkpt           string // the container whose checkpoint fails
	failCreate         string // the container whose create fails
	failPause          string // the container whose pause fails
	paused             map[string]bool
	runCfg             *runtimeapi.PodSandboxConfig
	created            []*runtimeapi.ContainerConfig
}

func (w *world) log(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, s)
}

func (w *world) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

type fakeSandboxes struct{ w *world }

func (f fakeSandboxes) Stop(ctx context.Context, id string) error {
	f.w.log("pod stop " + id)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.ready = false
	return nil
}

func (f fakeSandboxes) Remove(ctx context.Context, id string) error {
	f.w.log("pod remove " + id)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.ready = false // gone, which the container manager refuses too
	return nil
}

type fakeContainers struct{ w *world }

func (f fakeContainers) Create(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	if f.w.inCreate != nil {
		close(f.w.inCreate)
	}
	if f.w.release != nil {
		<-f.w.release
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	// The container manager refuses pods that are not ready.
	if !f.w.ready {
		return "", fmt.Errorf("pod %s is not ready: %w", podID, errdefs.ErrPrecondition)
	}
	id := cfg.GetMetadata().GetName()
	if id == f.w.failCreate {
		return "", fmt.Errorf("create %s: %w", id, errdefs.ErrInvalid)
	}
	f.w.created = append(f.w.created, cfg)
	f.w.ctrs = append(f.w.ctrs, id)
	f.w.calls = append(f.w.calls, "create "+id)
	return id, nil
}

func (f fakeContainers) StopPodContainers(ctx context.Context, podID string) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	for _, c := range f.w.ctrs {
		f.w.calls = append(f.w.calls, "ctr stop "+c)
	}
	return f.w.failCtr
}

func (f fakeContainers) RemovePodContainers(ctx context.Context, podID string) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if f.w.failCtr != nil {
		return f.w.failCtr
	}
	for _, c := range f.w.ctrs {
		f.w.calls = append(f.w.calls, "ctr remove "+c)
	}
	f.w.ctrs = nil
	return nil
}

func newPods(w *world) *Pods { return New(fakeSandboxes{w}, fakeContainers{w}, slog.Default()) }

func ctrConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: name}}
}

func TestStopAndRemoveTakeContainersFirst(t *testing.T) {
	w := &world{ready: true}
	p := newPods(w)
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		if _, err := p.CreateContainer(ctx, "pod", ctrConfig(n), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Stop(ctx, "pod"); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, "pod"); err != nil {
		t.Fatal(err)
	}
	want := []string{"create a", "create b", "ctr stop a", "ctr stop b", "pod stop pod", "ctr remove a", "ctr remove b", "pod remove pod"}
	if got := w.seen(); !slices.Equal(got, want) {
		t.Fatalf("calls\n got %q\nwant %q", got, want)
	}
	if len(p.gates) != 0 {
		t.Fatalf("gates left: %v", p.gates)
	}
}

func TestContainerFailureKeepsPod(t *testing.T) {
	w := &world{ready: true, ctrs: []string{"a"}, failCtr: errdefs.ErrDeadline}
	p := newPods(w)
	ctx := context.Background()
	if err := p.Stop(ctx, "pod"); !errors.Is(err, errdefs.ErrDeadline) {
		t.Fatalf("stop: %v", err)
	}
	if err := p.Remove(ctx, "pod"); !errors.Is(err, errdefs.ErrDeadline) {
		t.Fatalf("remove: %v", err)
	}
	for _, c := range w.seen() {
		if c == "pod stop pod" || c == "pod remove pod" {
			t.Fatalf("pod torn down under a container that did not stop: %q", w.seen())
		}
	}
}

// A create that is under way when the pod is stopped finishes first, and
// the stop takes its container; a create after the stop is refused.
func TestCreateDuringStopDoesNotLeak(t *testing.T) {
	for _, op := range []string{"stop", "remove"} {
		t.Run(op, func(t *testing.T) {
			w := &world{ready: true, inCreate: make(chan struct{}), release: make(chan struct{})}
			p := newPods(w)
			ctx := context.Background()
			created := make(chan error, 1)
			go func() {
				_, err := p.CreateContainer(ctx, "pod", ctrConfig("late"), nil)
				created <- err
			}()
			<-w.inCreate
			stopped := make(chan error, 1)
			go func() {
				if op == "stop" {
					stopped <- p.Stop(ctx, "pod")
				} else {
					stopped <- p.Remove(ctx, "pod")
				}
			}()
			select {
			case err := <-stopped:
				t.Fatalf("%s did not wait for the create under way: %v", op, err)
			case <-time.After(50 * time.Millisecond):
			}
			close(w.release)
			if err := <-created; err != nil {
				t.Fatal(err)
			}
			if err := <-stopped; err != nil {
				t.Fatal(err)
			}
			want := "ctr " + op + " late"
			if got := w.seen(); !slices.Contains(got, want) {
				t.Fatalf("%s missed the container created meanwhile: %q", op, got)
			}
			w.inCreate, w.release = nil, nil
			if _, err := p.CreateContainer(ctx, "pod", ctrConfig("after"), nil); !errors.Is(err, errdefs.ErrPrecondition) {
				t.Fatalf("create after %s: %v", op, err)
			}
		})
	}
}

// Pods are independent: a slow stop of one does not hold creates in another.
func TestGatesArePerPod(t *testing.T) {
	w := &world{ready: true}
	bs := blockingStop{fakeContainers{w}, make(chan struct{}), make(chan struct{})}
	p := New(fakeSandboxes{w}, bs, slog.Default())
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- p.Stop(ctx, "slow") }()
	<-bs.entered
	if _, err := p.CreateContainer(ctx, "other", ctrConfig("x"), nil); err != nil {
		t.Fatal(err)
	}
	close(bs.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type blockingStop struct {
	fakeContainers
	entered, block chan struct{}
}

func (b blockingStop) StopPodContainers(ctx context.Context, podID string) error {
	if podID == "slow" {
		close(b.entered)
		<-b.block
	}
	return b.fakeContainers.StopPodContainers(ctx, podID)
}
