package netns

import (
	"fmt"
	"io"
	"os"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage/pkg/reexec"

	"github.com/podunit/podunit/errdefs"
)

// User is the user namespace, which a pod's other namespaces are owned by
// when it has one of its own.
const User Kind = "user"

// holderName is the argv[0] under which podunit's binary, re-executed,
// only waits: it is the process the new namespaces are created for.
const holderName = "podunit-userns-holder"

func init() {
	reexec.Register(holderName, func() {
		// The parent closes the pipe once it has pinned the namespaces.
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	})
}

// NewInUser creates a user namespace with the given ID mappings, pins it at
// userPath, and creates the namespaces in pins (net, ipc, uts) owned by it.
// Namespaces owned by the pod's user namespace are what lets a container in
// it mount sysfs and mqueue and be root of its own network (the kernel
// checks the owner, not the container's credentials); root on the host
// still enters and configures them. Either all are pinned or none is.
//
// A thread of a multithreaded process cannot enter a new user namespace,
// so a child does: podunit's binary re-executed as a holder, cloned into
// all the namespaces at once (the kernel creates the user namespace first,
// so it owns the rest), with the mappings written by os/exec before it
// runs. Once pinned, the holder is told to exit.
func NewInUser(userPath string, uids, gids []specs.LinuxIDMapping, pins map[Kind]string) (retErr error) {
	if userPath == "" || len(uids) == 0 || len(gids) == 0 {
		return fmt.Errorf("user namespace needs a pin path and uid and gid mappings: %w", errdefs.ErrInvalid)
	}
	flags := uintptr(syscall.CLONE_NEWUSER)
	for k := range pins {
		if k == PID || k == User {
			return fmt.Errorf("namespace kind %q cannot be created beside a user namespace: %w", k, errdefs.ErrInvalid)
		}
		f, err := k.cloneFlag()
		if err != nil {
			return err
		}
		flags |= uintptr(f)
	}
	cmd := reexec.Command(holderName)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  flags,
		UidMappings: sysIDMap(uids),
		GidMappings: sysIDMap(gids),
		// Containers join with supplementary groups set by the runtime
		// (setgroups(2)), which "deny" would refuse; the mapping is made
		// by root, so "allow" gives nobody more than the mapping does.
		GidMappingsEnableSetgroups: true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("user namespace holder: %w", err)
	}
	if err := cmd.Start(); err != nil {
		stdin.Close()
		return fmt.Errorf("start user namespace holder: %w", err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil && retErr == nil {
			retErr = fmt.Errorf("user namespace holder: %w", err)
		}
	}()
	var done []string
	defer func() {
		if retErr != nil {
			for _, p := range done {
				_ = Unpin(p)
			}
		}
	}()
	all := map[Kind]string{User: userPath}
	for k, p := range pins {
		all[k] = p
	}
	for k, p := range all {
		if err := pin(fmt.Sprintf("/proc/%d/ns/%s", cmd.Process.Pid, k), p); err != nil {
			return err
		}
		done = append(done, p)
	}
	return nil
}

func sysIDMap(m []specs.LinuxIDMapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(m))
	for i, x := range m {
		out[i] = syscall.SysProcIDMap{ContainerID: int(x.ContainerID), HostID: int(x.HostID), Size: int(x.Size)}
	}
	return out
}
