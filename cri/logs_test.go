package cri

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeStatuses map[string]runtimeapi.ContainerState

func (f fakeStatuses) Status(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatus, map[string]string, error) {
	st, ok := f[id]
	if !ok {
		return nil, nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return &runtimeapi.ContainerStatus{Id: id + "-full", State: st, LogPath: "/var/log/pods/p/" + id + "-full.log"}, nil, nil
}

type fakeReopener struct {
	logs     map[string]bool
	reopened []string
}

func (f *fakeReopener) Reopen(id, path string) error {
	if path != "/var/log/pods/p/"+id+".log" {
		return fmt.Errorf("log path %q", path)
	}
	if !f.logs[id] {
		return fmt.Errorf("container %s has no log: %w", id, errdefs.ErrNotFound)
	}
	f.reopened = append(f.reopened, id)
	return nil
}

func TestReopenContainerLog(t *testing.T) {
	cs := fakeStatuses{
		"run":    runtimeapi.ContainerState_CONTAINER_RUNNING,
		"nolog":  runtimeapi.ContainerState_CONTAINER_RUNNING,
		"exited": runtimeapi.ContainerState_CONTAINER_EXITED,
		"new":    runtimeapi.ContainerState_CONTAINER_CREATED,
	}
	lr := &fakeReopener{logs: map[string]bool{"run-full": true, "exited-full": true, "new-full": true}}
	for id, want := range map[string]error{
		"run":     nil,
		"":        errdefs.ErrInvalid,
		"missing": errdefs.ErrNotFound,
		"exited":  errdefs.ErrPrecondition,
		"new":     errdefs.ErrPrecondition,
		"nolog":   errdefs.ErrPrecondition,
	} {
		err := reopenContainerLog(context.Background(), cs, lr, id)
		if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
			t.Errorf("%q: %v, want %v", id, err, want)
		}
	}
	// the full id from the status names the log, not the prefix asked for
	if len(lr.reopened) != 1 || lr.reopened[0] != "run-full" {
		t.Fatalf("reopened %v", lr.reopened)
	}
}
