package imagestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/signature"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// Pull fetches ref into the store and returns the image ID, which is also
// what Status reports as Image.Id (critest "Image Identifier Consistency":
// PullImageResponse.image_ref must equal Image.id). The ID is the config
// digest, so one image pulled under two names from two registries has one
// ID.
//
// Concurrent pulls of the same reference with the same credentials share a
// single download. A caller that gives up (gRPC deadline, cancellation)
// returns at once; the download is cancelled when no caller waits for it.
func (s *Store) Pull(ctx context.Context, ref string, auth *runtimeapi.AuthConfig) (string, error) {
	named, err := NormalizeReference(ref)
	if err != nil {
		return "", err
	}
	creds, err := convertAuth(auth)
	if err != nil {
		return "", err
	}
	key := named.String() + "|" + creds.key()
	id, err := s.pulls.do(ctx, key, func(fctx context.Context) (string, error) {
		return s.pull(fctx, named, creds)
	})
	if err != nil && ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", fmt.Errorf("pulling image %s: %w: %w", named, errdefs.ErrDeadline, ctx.Err())
		}
		return "", fmt.Errorf("pulling image %s: %w", named, ctx.Err())
	}
	return id, err
}

// stallError is the cause a pull is cancelled with when it stops progressing.
type stallError struct {
	image    string
	registry string
	timeout  time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("pulling image %s from registry %s: no data received for %s (pull progress timeout)", e.image, e.registry, e.timeout)
}

func (e *stallError) Unwrap() error { return errdefs.ErrDeadline }

// pull is one download; it runs detached from any single caller's context.
func (s *Store) pull(ctx context.Context, named reference.Named, creds credentials) (_ string, retErr error) {
	log := s.log.With("image", named.String())
	start := time.Now()

	l := s.cur()
	sys := systemContext(s.opts, l)
	creds.apply(sys)
	policy, err := signature.NewPolicyFromFile(l.PolicyPath)
	if err != nil {
		return "", fmt.Errorf("reading signature policy: %w", err)
	}
	policyCtx, err := signature.NewPolicyContext(policy)
	if err != nil {
		return "", fmt.Errorf("signature policy %s: %w", l.PolicyPath, err)
	}
	defer func() { _ = policyCtx.Destroy() }()

	before, err := s.layerIDs()
	if err != nil {
		return "", err
	}
	// Registered before the slot is taken so that it runs after release.
	defer func() {
		if retErr != nil && errors.Is(retErr, errdefs.ErrResourceExhausted) {
			s.dropOrphanLayers(ctx, before)
		}
	}()
	release, err := s.pulls.acquire(ctx)
	if err != nil {
		return "", err
	}
	defer release()

	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timeout := l.PullProgressTimeout
	var watch stallWatch
	stopWatch := watch.start(timeout, func() {
		cancel(&stallError{image: named.String(), registry: registryOf(named), timeout: timeout})
	})
	id, err := s.fetch(pctx, named, sys, policyCtx, watch.touch)
	stopWatch()
	if err != nil {
		var stall *stallError
		if cause := context.Cause(pctx); errors.As(cause, &stall) {
			log.WarnContext(ctx, "pull stalled", "timeout", timeout)
			return "", fmt.Errorf("%w (%w)", stall, err)
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("pulling image %s: %w", named, context.Cause(ctx))
		}
		return "", classifyPullError(named.String(), registryOf(named), err)
	}
	log.InfoContext(ctx, "pulled image", "id", id, "duration", time.Since(start).Round(time.Millisecond))
	return id, nil
}

// stallWatch notices a pull that stops moving: fetch touches it whenever
// bytes arrive from the registry or reach storage.
type stallWatch struct{ last atomic.Int64 }

func (w *stallWatch) touch() { w.last.Store(time.Now().UnixNano()) }

// start calls stalled once if no touch comes for timeout; the returned
// function stops watching.
func (w *stallWatch) start(timeout time.Duration, stalled func()) (stop func()) {
	w.touch()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		// Checking four times per timeout fires at most a quarter late.
		tick := time.NewTicker(min(max(timeout/4, time.Millisecond), time.Second))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if time.Since(time.Unix(0, w.last.Load())) >= timeout {
					stalled()
					return
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// layerIDs snapshots the store's layers, to find what a failed pull left.
func (s *Store) layerIDs() (map[string]bool, error) {
	layers, err := s.store.Layers()
	if err != nil {
		return nil, storageErr("listing layers", err)
	}
	ids := make(map[string]bool, len(layers))
	for _, l := range layers {
		ids[l.ID] = true
	}
	return ids, nil
}

// dropOrphanLayers deletes layers created since before that no image,
// container or other layer uses. It runs only after a disk-full failure:
// elsewhere, complete layers are kept so the kubelet's retry resumes instead
// of starting over. It takes the pull group exclusively so that no
// concurrent pull is building on a layer that looks orphaned.
func (s *Store) dropOrphanLayers(ctx context.Context, before map[string]bool) {
	if !s.pulls.tryExclusive() {
		s.log.WarnContext(ctx, "not reclaiming layers of a failed pull while other pulls run")
		return
	}
	defer s.pulls.endExclusive()
	for {
		layers, err := s.store.Layers()
		if err != nil {
			return
		}
		used := map[string]bool{}
		for _, l := range layers {
			used[l.Parent] = true
		}
		images, err := s.store.Images()
		if err != nil {
			return
		}
		for _, img := range images {
			used[img.TopLayer] = true
			for _, l := range img.MappedTopLayers {
				used[l] = true
			}
		}
		containers, err := s.store.Containers()
		if err != nil {
			return
		}
		for _, c := range containers {
			used[c.LayerID] = true
		}
		deleted := 0
		for _, l := range layers {
			if before[l.ID] || used[l.ID] {
				continue
			}
			if err := s.store.DeleteLayer(l.ID); err != nil {
				s.log.WarnContext(ctx, "reclaiming layer of a failed pull", "layer", l.ID, "err", err)
				continue
			}
			deleted++
		}
		if deleted == 0 {
			return
		}
	}
}

// pullGroup shares in-flight downloads and bounds their number.
type pullGroup struct {
	mu      sync.Mutex
	flights map[string]*flight
	running sync.WaitGroup // download goroutines, for Close
	sem     chan struct{}
	// active is held shared by every download and exclusively while
	// reclaiming a failed pull's layers.
	active sync.RWMutex
}

type flight struct {
	done    chan struct{}
	id      string
	err     error
	waiters int
	cancel  context.CancelCauseFunc
}

func newPullGroup(parallel int) *pullGroup {
	return &pullGroup{flights: map[string]*flight{}, sem: make(chan struct{}, parallel)}
}

// do runs fn once per key at a time; callers with the same key wait for the
// same result. fn's context keeps the first caller's values (logging) but
// not its cancellation: it is cancelled when the last waiter leaves.
func (g *pullGroup) do(ctx context.Context, key string, fn func(context.Context) (string, error)) (string, error) {
	g.mu.Lock()
	f, ok := g.flights[key]
	if !ok {
		fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		g.flights[key] = f
		g.running.Add(1)
		go func() {
			defer g.running.Done()
			id, err := fn(fctx)
			g.mu.Lock()
			if g.flights[key] == f {
				delete(g.flights, key)
			}
			g.mu.Unlock()
			f.id, f.err = id, err
			cancel(nil)
			close(f.done)
		}()
	}
	f.waiters++
	g.mu.Unlock()

	select {
	case <-f.done:
		return f.id, f.err
	case <-ctx.Done():
		g.mu.Lock()
		f.waiters--
		abandoned := f.waiters == 0
		if abandoned && g.flights[key] == f {
			// A new caller must start afresh, not join a dying download.
			delete(g.flights, key)
		}
		g.mu.Unlock()
		if abandoned {
			f.cancel(fmt.Errorf("every caller gave up: %w", context.Cause(ctx)))
		}
		return "", ctx.Err()
	}
}

// acquire takes a download slot and a shared hold on active.
func (g *pullGroup) acquire(ctx context.Context) (func(), error) {
	select {
	case g.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	g.active.RLock()
	return func() {
		g.active.RUnlock()
		<-g.sem
	}, nil
}

func (g *pullGroup) tryExclusive() bool { return g.active.TryLock() }
func (g *pullGroup) endExclusive()      { g.active.Unlock() }

// cancelAll aborts every download and waits for them to end, for Close:
// the store must not shut down under a download still writing to it.
func (g *pullGroup) cancelAll() {
	g.mu.Lock()
	for _, f := range g.flights {
		f.cancel(errors.New("image store closing"))
	}
	g.mu.Unlock()
	g.running.Wait()
}
