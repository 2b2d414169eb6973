// Package relayd is the log relay daemon's process: flags, socket
// activation, sd_notify. It is apart from package logrelay so the unit
// helper, which only registers with the relay, does not link go-systemd's
// activation (crypto/tls and its package inits, ~0.9 ms of each helper
// start: GODEBUG=inittrace=1, 2026-12-05).
package relayd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/fdstore"
	"github.com/podunit/podunit/logrelay"
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
	s := logrelay.New(logrelay.Options{Socket: *socket, StateDir: *stateDir, Store: fdstore.Notify{}, Logger: log})
	s.Restore(activation.Files(true))
	l, err := logrelay.Listen(*socket)
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
