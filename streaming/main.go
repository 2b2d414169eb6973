package streaming

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/systemd"
)

// UnitName is the session process's transient service.
const UnitName = "podunit-stream.service"

// HelperName is the hidden subcommand that runs the session process.
const HelperName = "_stream"

// Main is `podunit _stream --socket PATH --address HOST:PORT [--tls-cert
// F --tls-key F] --relay-socket PATH`, the process of
// podunit-stream.service: the streaming server and the sessions.
func Main(args []string) int {
	fs := flag.NewFlagSet(HelperName, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("socket", "", "where podunit registers sessions")
	var cfg Config
	fs.StringVar(&cfg.Address, "address", "", "streaming listen address")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "PEM key")
	relay := fs.String("relay-socket", "", "the log relay (tty containers' terminals)")
	if err := fs.Parse(args); err != nil || *socket == "" || cfg.Address == "" || *relay == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: podunit _stream --socket PATH --address HOST:PORT [--tls-cert F --tls-key F] --relay-socket PATH")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	signal.Ignore(unix.SIGPIPE)
	reg := NewRegistry()
	srv, err := New(cfg, Deps{
		Containers: reg, Pods: reg, Exec: reg,
		Output: JournalFollower{}, Terminals: logrelay.Client{Socket: *relay},
		Logger: log,
	})
	if err != nil {
		log.Error("streaming server", "err", err)
		return 1
	}
	l, err := ListenControl(*socket)
	if err != nil {
		srv.Close()
		log.Error("cannot listen", "socket", *socket, "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()
	go func() {
		if err := srv.Serve(); err != nil {
			log.Error("streaming server stopped", "err", err)
			stop()
		}
	}()
	_, _ = daemon.SdNotify(false, "READY=1\nSTATUS=serving "+srv.URL())
	c := &Control{Srv: srv, Reg: reg, Listen: ListenKey(cfg), Logger: log}
	err = c.Serve(ctx, l)
	_, _ = daemon.SdNotify(false, "STOPPING=1")
	srv.Close()
	if err != nil {
		log.Error("control socket", "err", err)
		return 1
	}
	return 0
}

// UnitProperties describe the session process's transient service.
// command is how to run it (the podunit binary and HelperName, entered
// into podunit's mount namespace when there is one: pods' network
// namespaces are pinned there).
func UnitProperties(command []string, socket, relaySocket string, cfg Config) []systemd.Property {
	p := func(name string, v any) systemd.Property {
		return systemd.Property{Name: name, Value: godbus.MakeVariant(v)}
	}
	argv := append(append([]string(nil), command...), "--socket", socket, "--address", cfg.Address, "--relay-socket", relaySocket)
	if cfg.TLSCert != "" {
		argv = append(argv, "--tls-cert", cfg.TLSCert, "--tls-key", cfg.TLSKey)
	}
	return []systemd.Property{
		p("Description", "podunit streaming sessions: exec, attach and port-forward"),
		// nsenter, which enters the mount namespace, would name the lines
		p("SyslogIdentifier", strings.TrimSuffix(UnitName, ".service")),
		p("Type", "notify"),
		p("NotifyAccess", "main"),
		sddbus.PropExecStart(argv, false),
		p("LimitNOFILE", uint64(1048576)),
		p("LimitNOFILESoft", uint64(1048576)),
		p("Restart", "always"),
		p("RestartUSec", uint64(100*time.Millisecond/time.Microsecond)),
		p("CollectMode", "inactive-or-failed"),
	}
}

// Ensure has a session process with cfg's listen configuration answering
// at socket: the running one, or a new transient unit. One listening
// with another configuration is stopped first (its sessions end).
func Ensure(ctx context.Context, sd systemd.Conn, props []systemd.Property, socket string, cfg Config, log *slog.Logger) error {
	listen, err := Ping(socket, time.Second)
	if err == nil && listen == ListenKey(cfg) {
		return nil
	}
	if err == nil {
		log.Warn("the streaming configuration changed: restarting the session process, open sessions end", "running", listen, "configured", ListenKey(cfg))
		if err := sd.StopUnit(ctx, UnitName); err != nil {
			return fmt.Errorf("stop %s: %w", UnitName, err)
		}
	}
	err = sd.StartTransientUnit(ctx, UnitName, props)
	if err != nil && !errors.Is(err, errdefs.ErrExists) {
		return fmt.Errorf("start %s: %w", UnitName, err)
	}
	// Type=notify: the start job ends at READY=1; a unit that existed may
	// still be (re)starting.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		listen, perr := Ping(socket, time.Second)
		if perr == nil && listen == ListenKey(cfg) {
			return nil
		}
		if perr == nil {
			perr = fmt.Errorf("it listens with %q, not %q", listen, ListenKey(cfg))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not answer at %s: %w", UnitName, socket, perr)
		}
	}
}
