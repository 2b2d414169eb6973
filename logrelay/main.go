package logrelay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/fdstore"
	"github.com/podunit/podunit/selfbin"
	"github.com/podunit/podunit/systemd"
)

// Main is `podunit-logrelay` (or `podunit _logrelay`) `--socket PATH
// --state-dir DIR`, the process of podunit-logrelay.service.
func Main(args []string) int {
	fs := flag.NewFlagSet("_logrelay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("socket", "", "where containers' wrappers register")
	stateDir := fs.String("state-dir", "", "tap directories of attachable containers")
	if err := fs.Parse(args); err != nil || *socket == "" || *stateDir == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: podunit _logrelay --socket PATH --state-dir DIR")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Our own stdout is a journald stream; never die of SIGPIPE on it.
	signal.Ignore(unix.SIGPIPE)
	s := New(Options{Socket: *socket, StateDir: *stateDir, Store: fdstore.Notify{}, Logger: log})
	s.Restore(activation.Files(true))
	l, err := Listen(*socket)
	if err != nil {
		log.Error("cannot listen", "socket", *socket, "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()
	_, _ = daemon.SdNotify(false, fmt.Sprintf("READY=1\nSTATUS=relaying %d containers", s.Active()))
	log.Info("log relay ready", "socket", *socket, "containers", s.Active())
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = daemon.SdNotify(false, fmt.Sprintf("STATUS=relaying %d containers", s.Active()))
			}
		}
	}()
	if err := s.Serve(ctx, l); err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	// Exiting closes this process' copies of the pipes and streams; on a
	// restart systemd still holds the fd store's. podunit never stops the
	// relay while containers run.
	_, _ = daemon.SdNotify(false, "STOPPING=1")
	log.Info("log relay stopping", "containers", s.Active())
	return 0
}

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
	if Ping(socket, time.Second) == nil {
		return nil
	}
	err := sd.StartTransientUnit(ctx, UnitName, UnitProperties(self, socket, stateDir))
	if err != nil && !errors.Is(err, errdefs.ErrExists) {
		return fmt.Errorf("start %s: %w", UnitName, err)
	}
	// Type=notify: the start job ends at READY=1; a unit that existed may
	// still be (re)starting.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		perr := Ping(socket, time.Second)
		if perr == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not answer at %s: %w", UnitName, socket, perr)
		}
	}
}
