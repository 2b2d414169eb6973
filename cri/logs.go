package cri

import (
	"context"
	"errors"
	"fmt"

	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerStatuser is the part of container.Manager the log RPCs use.
type containerStatuser interface {
	Status(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatus, map[string]string, error)
}

// LogReopener makes the writer of a container's CRI log file (the node's
// log relay, logrelay.Client) start a new file at logPath, returning once
// it has; errdefs.ErrNotFound when there is none to write.
type LogReopener interface {
	Reopen(containerID, logPath string) error
}

// reopenContainerLog is ReopenContainerLog without the server: the kubelet
// renamed the container's log file (rotation) and wants new output in a new
// file at log_path. Only a running container can be reopened; that is also
// what the kubelet expects of an exited one (it then stops rotating it).
func reopenContainerLog(ctx context.Context, cs containerStatuser, lr LogReopener, id string) error {
	if id == "" {
		return fmt.Errorf("reopen container log: container id: %w", errdefs.ErrInvalid)
	}
	st, _, err := cs.Status(ctx, id, false)
	if err != nil {
		return err
	}
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return fmt.Errorf("reopen log of container %s: container is %s, not running: %w", id, st.GetState(), errdefs.ErrPrecondition)
	}
	if err := lr.Reopen(st.GetId(), st.GetLogPath()); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("reopen log of container %s: it has no log path: %w", id, errdefs.ErrPrecondition)
		}
		return err
	}
	return nil
}
