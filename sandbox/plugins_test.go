package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

type fakePlugins struct {
	mu     sync.Mutex
	events []string
	runErr error
	// listed: whether the pod was listed while its RunPodSandbox ran
	listed func(id string) bool
}

func (f *fakePlugins) add(ev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
}

func (f *fakePlugins) BlockSync() func() { f.add("block"); return func() { f.add("unblock") } }

func (f *fakePlugins) RunPodSandbox(_ context.Context, sb *Sandbox) error {
	ev := "run " + string(sb.State)
	if f.listed != nil && f.listed(sb.ID) {
		ev += " listed"
	}
	f.add(ev)
	return f.runErr
}

func (f *fakePlugins) StopPodSandbox(_ context.Context, sb *Sandbox) error {
	f.add("stop " + string(sb.State))
	return errors.New("plugin failure must not keep the pod from stopping")
}

func (f *fakePlugins) RemovePodSandbox(_ context.Context, sb *Sandbox) error {
	f.add("remove")
	return nil
}

func (f *fakePlugins) got() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.events, ", ")
}

// Plugins see a pod once it is set up and before it is listed; its stop
// once however often it is stopped; its removal.
func TestPluginsPodLifecycle(t *testing.T) {
	p := &fakePlugins{}
	e := newEnv(t, func(o *Options) { o.Plugins = p })
	p.listed = func(id string) bool {
		_, err := e.m.Get(context.Background(), id)
		return err == nil
	}
	ctx := context.Background()
	id, err := e.m.Run(ctx, podConfig("a"), "")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := e.m.Stop(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, want := p.got(), "block, run notready, unblock, stop ready, remove"; got != want {
		t.Errorf("hooks %q, want %q", got, want)
	}
}

// A plugin's refusal undoes the pod like any failed step.
func TestPluginsRefuseRun(t *testing.T) {
	p := &fakePlugins{runErr: errors.New("no room on this node")}
	e := newEnv(t, func(o *Options) { o.Plugins = p })
	_, err := e.m.Run(context.Background(), podConfig("a"), "")
	if err == nil || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("run: %v", err)
	}
	if n := len(e.m.List(context.Background())); n != 0 {
		t.Fatalf("%d pods listed", n)
	}
	if e.net.count("del") != 1 || len(e.sd.Units) != 0 {
		t.Errorf("not rolled back: net %v units %v", e.net.calls, e.sd.Units)
	}
	assertNoTraces(t, e, e.net.reqs[0].PodID)
	p.runErr = nil
	if _, err := e.m.Run(context.Background(), podConfig("a"), ""); err != nil {
		t.Fatalf("retry: %v", err)
	}
}
