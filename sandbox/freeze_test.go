package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/podunit/podunit/errdefs"
)

func TestFreezeThaw(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, err := e.m.Run(ctx, podConfig("web"), "runc")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := e.m.Get(ctx, id)
	if err := e.m.Freeze(ctx, id); err != nil {
		t.Fatal(err)
	}
	if !e.sd.Units[sb.Slice].Frozen {
		t.Fatalf("slice %s not frozen: %v", sb.Slice, e.sd.Calls)
	}
	if err := e.m.Thaw(ctx, id); err != nil {
		t.Fatal(err)
	}
	if e.sd.Units[sb.Slice].Frozen {
		t.Fatal("slice still frozen")
	}

	// systemd's refusal (cgroup v1: no freezer) is a precondition.
	e.sd.FreezeErr = fmt.Errorf("NotSupported: %w", errdefs.ErrPrecondition)
	if err := e.m.Freeze(ctx, id); !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), sb.Slice) {
		t.Errorf("freeze without a freezer: %v", err)
	}
	e.sd.FreezeErr = nil

	if err := e.m.Freeze(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("freeze of an unknown pod: %v", err)
	}
	if err := e.m.Thaw(ctx, "nope"); err != nil {
		t.Errorf("thaw of an unknown pod: %v", err)
	}
	if err := e.m.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Freeze(ctx, id); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Errorf("freeze of a stopped pod: %v", err)
	}
}

// A slice that holds another pod too is not frozen: that pod would stop
// with it.
func TestFreezeRefusesSharedSlice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var ids []string
	for _, n := range []string{"a", "b"} {
		cfg := podConfig(n)
		cfg.Linux.CgroupParent = "/kubepods.slice/kubepods-shared.slice"
		id, err := e.m.Run(ctx, cfg, "runc")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := e.m.Freeze(ctx, ids[0]); !errors.Is(err, errdefs.ErrPrecondition) || !strings.Contains(err.Error(), ids[1]) {
		t.Errorf("freeze of a shared slice: %v", err)
	}
	if slices.ContainsFunc(e.sd.Calls, func(c string) bool { return strings.HasPrefix(c, "freeze ") }) {
		t.Errorf("systemd asked to freeze: %v", e.sd.Calls)
	}
}
