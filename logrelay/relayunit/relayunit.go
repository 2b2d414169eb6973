// Package relayunit runs the node's log relay (package logrelay) as the
// transient unit podunit-logrelay.service.
//
// It is apart from logrelay because logrelay is linked into
// podunit-unithelper, which systemd starts twice per container (ExecStart
// and ExecStopPost): the D-Bus and metrics packages this one needs would
// make every start of the helper run their init, ~7 ms of CPU each time
// on a 2-core node (docs/benchmarks.md, StartContainer).
package relayunit

import (
	"context"
	"errors"
	"fmt"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/selfbin"
	"github.com/podunit/podunit/systemd"
)

// BinaryName is the relay's own small binary, installed next to podunit.
const BinaryName = "podunit-logrelay"

// Command is how the relay is run: the small binary next to self (the
// podunit binary) when there is one, else `self _logrelay`.
func Command(self string) []string {
	if small, ok := selfbin.Sibling(self, BinaryName); ok {
		return []string{small}
	}
	return []string{self, "_logrelay"}
}

// UnitProperties describe the relay's transient service: self is the
// podunit binary.
func UnitProperties(self, socket, stateDir string) []systemd.Property {
	p := func(name string, v any) systemd.Property {
		return systemd.Property{Name: name, Value: godbus.MakeVariant(v)}
	}
	return []systemd.Property{
		p("Description", "podunit log relay: container stdout/stderr pipes to journald"),
		p("Type", "notify"),
		p("NotifyAccess", "main"),
		sddbus.PropExecStart(append(Command(self), "--socket", socket, "--state-dir", stateDir), false),
		// Four descriptors per running container.
		p("FileDescriptorStoreMax", uint32(65536)),
		p("LimitNOFILE", uint64(1048576)),
		p("LimitNOFILESoft", uint64(1048576)),
		p("Restart", "always"),
		p("RestartUSec", uint64(100*time.Millisecond/time.Microsecond)),
		// Like the shims of other runtimes: the OOM killer takes workloads
		// first, since without the relay every container's output stops.
		p("OOMScoreAdjust", int32(-998)),
		p("CollectMode", "inactive-or-failed"),
	}
}

// Ensure has a relay answering at socket: the running one, or a new
// transient unit started through systemd.
func Ensure(ctx context.Context, sd systemd.Conn, self, socket, stateDir string) error {
	if logrelay.Ping(socket, time.Second) == nil {
		return nil
	}
	err := sd.StartTransientUnit(ctx, logrelay.UnitName, UnitProperties(self, socket, stateDir))
	if err != nil && !errors.Is(err, errdefs.ErrExists) {
		return fmt.Errorf("start %s: %w", logrelay.UnitName, err)
	}
	// Type=notify: the start job ends at READY=1; a unit that existed may
	// still be (re)starting.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		perr := logrelay.Ping(socket, time.Second)
		if perr == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not answer at %s: %w", logrelay.UnitName, socket, perr)
		}
	}
}
