package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/cri"
	"github.com/podunit/podunit/mountns"
	"github.com/podunit/podunit/streaming"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func init() {
	register("serve", command{summary: "serve the CRI on a unix socket (the default)", run: runServe})
}

// mountNS is the pin of podunit's private mount namespace, "" when
// runtime.private_mount_namespace is off.
func mountNS(cfg *config.Config) string {
	if !cfg.Runtime.PrivateMountNamespace {
		return ""
	}
	return mountns.Pin(cfg.Paths.RunDir)
}

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cf configFlags
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: podunit serve [flags]\n\nServes the CRI v1 RuntimeService and ImageService. Supports systemd socket\nactivation (LISTEN_FDS) and sd_notify (Type=notify, WatchdogSec=).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	// Until the reloader takes SIGHUP, its default action would kill
	// podunit: a reload that comes early waits here instead.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	cfg, code := cf.load()
	if cfg == nil {
		return code
	}
	// First of all: podunit re-executes itself inside its mount
	// namespace here (same PID), before it opens or mounts anything.
	if pin := mountNS(cfg); pin != "" {
		owned := []string{cfg.Paths.RunDir, filepath.Join(cfg.Image.StorageRoot, "overlay")}
		if err := mountns.Enter(pin, owned); errors.Is(err, mountns.ErrHostMounts) {
			fmt.Fprintf(os.Stderr, "podunit: no private mount namespace: %v; podunit mounts in the host's until they are gone (drain the node or reboot)\n", err)
			cfg.Runtime.PrivateMountNamespace = false
		} else if err != nil {
			fmt.Fprintf(os.Stderr, "podunit: %v\n", err)
			return 1
		}
	}
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg.Server.LogLevel))
	log := newLogger(cfg, level)
	slog.SetDefault(log)
	rl := newReloader(cfg, cf.read, level, log)
	if err := serve(cfg, log, rl, hup); err != nil {
		log.Error("podunit stopped", "err", err)
		fmt.Fprintf(os.Stderr, "podunit: %v\n", err)
		return 1
	}
	return 0
}

// newLogger writes to stderr (the journal) at level, which a reload changes.
func newLogger(cfg *config.Config, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Server.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func serve(cfg *config.Config, log *slog.Logger, rl *reloader, hup <-chan os.Signal) error {
	for _, d := range []string{cfg.Paths.StateDir, cfg.Paths.RunDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	// systemd passes both the activation socket and, after a restart, the
	// descriptors an older podunit parked in its fd store (released at once).
	stored, sockets := streaming.SplitActivationFiles(activation.Files(true))
	lis, release, err := listen(cfg, sockets, log)
	if err != nil {
		return err
	}
	defer release()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := wire(ctx, cfg, log, stored, rl)
	if err != nil {
		return err
	}
	defer svc.close()

	gs := grpc.NewServer(
		grpc.UnaryInterceptor(cri.UnaryInterceptor(log)),
		grpc.StreamInterceptor(cri.StreamInterceptor(log)),
		grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(64<<20),
	)
	runtimeapi.RegisterRuntimeServiceServer(gs, svc.cri)
	runtimeapi.RegisterImageServiceServer(gs, svc.cri)

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	log.Info("podunit serving", "version", podunitVersion(), "socket", lis.Addr().String())
	notify(log, daemon.SdNotifyReady, "STATUS=serving CRI on "+lis.Addr().String())
	stopWatchdog := watchdog(log)
	defer stopWatchdog()
	go rl.reloadOnSignal(ctx, hup)

	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-sigc:
		log.Info("stopping", "signal", sig.String())
	case err := <-errc:
		return fmt.Errorf("grpc server: %w", err)
	}
	notify(log, daemon.SdNotifyStopping, "STATUS=stopping")
	// Running containers belong to systemd and keep running; only
	// in-flight CRI calls are given a moment to finish.
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		gs.Stop()
	}
	return nil
}

func notify(log *slog.Logger, states ...string) {
	for _, s := range states {
		if _, err := daemon.SdNotify(false, s); err != nil {
			log.Warn("sd_notify failed", "state", s, "err", err)
		}
	}
}

// watchdog pings systemd at half the configured interval while the process
// is alive; a hung process stops pinging and systemd restarts it.
func watchdog(log *slog.Logger) func() {
	iv, err := daemon.SdWatchdogEnabled(false)
	if err != nil || iv == 0 {
		return func() {}
	}
	t := time.NewTicker(iv / 2)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-t.C:
				notify(log, daemon.SdNotifyWatchdog)
			case <-stop:
				t.Stop()
				return
			}
		}
	}()
	return func() { close(stop) }
}

// listen returns the CRI listener: the socket systemd passed us, or our own
// socket, guarded by a lock file so a second podunit refuses to start
// instead of stealing the socket from the first.
func listen(cfg *config.Config, activated []*os.File, log *slog.Logger) (net.Listener, func(), error) {
	for i, f := range activated {
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			log.Warn("ignoring a passed descriptor that is not a listening socket", "name", f.Name(), "err", err)
			continue
		}
		for _, extra := range activated[i+1:] {
			extra.Close()
		}
		log.Info("using socket-activated listener", "addr", l.Addr().String())
		return l, func() { l.Close() }, nil
	}
	sock := cfg.Server.Socket
	if err := os.MkdirAll(filepath.Dir(sock), 0o711); err != nil {
		return nil, nil, fmt.Errorf("create socket directory: %w", err)
	}
	lockPath := sock + ".lock"
	lf, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", lockPath, err)
	}
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lf.Close()
		return nil, nil, fmt.Errorf("another podunit is already serving %s (lock %s held)", sock, lockPath)
	}
	// With the lock held no other podunit is alive; a socket file that
	// still answers belongs to something else and must not be stolen.
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		lf.Close()
		return nil, nil, fmt.Errorf("another process is already serving %s", sock)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		lf.Close()
		return nil, nil, fmt.Errorf("remove stale socket %s: %w", sock, err)
	}
	old := unix.Umask(0o117)
	lis, err := net.Listen("unix", sock)
	unix.Umask(old)
	if err != nil {
		lf.Close()
		return nil, nil, fmt.Errorf("listen on %s: %w", sock, err)
	}
	gid := 0
	if g := cfg.Server.SocketGroup; g != "" {
		grp, err := user.LookupGroup(g)
		if err != nil {
			lis.Close()
			lf.Close()
			return nil, nil, fmt.Errorf("server.socket_group %q: %w", g, err)
		}
		gid, _ = strconv.Atoi(grp.Gid)
	}
	if err := os.Chown(sock, 0, gid); err != nil {
		log.Warn("chown socket", "err", err)
	}
	if err := os.Chmod(sock, 0o660); err != nil {
		lis.Close()
		lf.Close()
		return nil, nil, fmt.Errorf("chmod %s: %w", sock, err)
	}
	return lis, func() {
		lis.Close()
		lf.Close()
	}, nil
}
