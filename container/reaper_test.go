package container

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/statefile"
)

// gate blocks the fake store's DeleteRootfs of the IDs it is given until
// it is opened; entered reports each blocked call.
type gate struct {
	open    chan struct{}
	entered chan string
}

func newGate(e *env, ids ...string) *gate {
	g := &gate{open: make(chan struct{}), entered: make(chan string, 16)}
	e.imgs.setDeleteHook(func(id string) {
		if len(ids) == 0 || slices.Contains(ids, id) {
			g.entered <- id
			<-g.open
		}
	})
	return g
}

func (g *gate) waitEntered(t *testing.T, want string) {
	t.Helper()
	select {
	case id := <-g.entered:
		if id != want {
			t.Fatalf("DeleteRootfs of %s, want %s", id, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("DeleteRootfs of %s never called", want)
	}
}

// Remove returns while storage is still deleting the writable layer: the
// container is gone from List, and a manager loaded afresh over the same
// directories does not know it either. Its rootfs is unmounted by the
// deletion (assertClean after the gate opens).
func TestRemoveReturnsBeforeDeletion(t *testing.T) {
	e := newEnv(t)
	id := e.create("pod1", "app")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	g := newGate(e)
	done := make(chan error, 1)
	go func() { done <- e.m.Remove(ctx, id) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(g.open)
		t.Fatal("Remove waited for the storage deletion")
	}
	g.waitEntered(t, id) // the reaper is deleting now, after Remove
	if !e.imgs.has(id) {
		t.Error("writable layer deleted inside Remove")
	}
	if l, _ := e.m.List(ctx, nil); len(l) != 0 {
		t.Errorf("listed after Remove: %v", l)
	}
	if _, _, err := e.m.Status(ctx, id, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("status after Remove: %v", err)
	}
	if got := entries(e.opts.StateDir); !slices.Equal(got, []string{filepath.Join(trashName, id)}) {
		t.Errorf("state dir after Remove: %q, want only the trash entry", got)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := e.m.Drain(short); !errors.Is(err, errdefs.ErrDeadline) {
		t.Errorf("Drain while the deletion is blocked: %v", err)
	}

	// podunit restarted here would not load it again.
	m2 := e.newManager()
	if l, _ := m2.List(ctx, nil); len(l) != 0 {
		t.Errorf("a fresh manager lists: %v", l)
	}
	if _, _, err := m2.Status(ctx, id, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a fresh manager's status: %v", err)
	}
	close(g.open)
	e.assertClean()
}

// podunit died after committing a removal (state directory in the trash)
// and before the reaper was done: the next manager deletes the writable
// layer, the run directory wherever it is, and the trash entry. A failed
// deletion keeps the entry for the start after.
func TestStartFinishesTrash(t *testing.T) {
	e := newEnv(t)
	a := e.create("pod1", "a") // died right after the state rename
	b := e.create("pod1", "b") // died after the run dir's rename as well
	for _, id := range []string{a, b} {
		if err := e.imgs.UnmountRootfs(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := statefile.Move(e.m.stateDir(id), e.m.stateTrashOf(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(e.m.runDir(b), e.m.runTrashOf(b)); err != nil {
		t.Fatal(err)
	}
	e.imgs.deleteErr = errors.New("storage is busy")
	m2 := e.newManager()
	if l, _ := m2.List(ctx, nil); len(l) != 0 {
		t.Errorf("trashed containers listed: %v", l)
	}
	e.drain()
	left := entries(e.opts.StateDir)
	if len(left) != 1 {
		t.Fatalf("after a failed deletion the trash holds %q, want one entry", left)
	}
	e.newManager()
	e.assertClean()
}

// With the reaper's queue full, Remove deletes inline rather than drop
// the work.
func TestRemoveInlineWhenQueueFull(t *testing.T) {
	e := newEnv(t)
	e.opts.reapQueue = 1
	e.m = e.newManager()
	first, queued, inline := e.create("pod1", "a"), e.create("pod1", "b"), e.create("pod1", "c")
	g := newGate(e, first)
	if err := e.m.Remove(ctx, first); err != nil {
		t.Fatal(err)
	}
	g.waitEntered(t, first) // the reaper holds it; the queue is empty
	if err := e.m.Remove(ctx, queued); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Remove(ctx, inline); err != nil {
		t.Fatal(err)
	}
	if e.imgs.has(inline) {
		t.Error("queue full: the writable layer was not deleted inline")
	}
	if _, err := os.Stat(e.m.stateTrashOf(inline)); !os.IsNotExist(err) {
		t.Errorf("queue full: trash entry left: %v", err)
	}
	if !e.imgs.has(queued) {
		t.Error("the queued removal did not wait for the reaper")
	}
	close(g.open)
	e.assertClean()
}
