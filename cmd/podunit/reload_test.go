package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/cri"
	"github.com/podunit/podunit/metrics"
	"github.com/podunit/podunit/systemd/systemdtest"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// reloadEnv is a reloader over a real configuration file with recording
// steps in place of the services.
type reloadEnv struct {
	t     *testing.T
	path  string
	rl    *reloader
	logs  *syncBuffer
	mu    sync.Mutex
	calls []string // step name and the value it was given
	notes []string
	fail  map[string]error // step name -> error its apply returns for a new config
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newReloadEnv(t *testing.T, toml string) *reloadEnv {
	t.Helper()
	e := &reloadEnv{t: t, path: filepath.Join(t.TempDir(), "podunit.toml"), logs: &syncBuffer{}, fail: map[string]error{}}
	e.write(toml)
	cf := &configFlags{path: e.path}
	cfg, err := cf.read()
	if err != nil {
		t.Fatal(err)
	}
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg.Server.LogLevel))
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: level}))
	e.rl = newReloader(&cfg, cf.read, level, log)
	e.rl.notify = func(states ...string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.notes = append(e.notes, strings.Join(states, " "))
	}
	step := func(name string, keys []string, always bool, value func(c config.Config) string) reloadStep {
		return reloadStep{name: name, keys: keys, always: always, apply: func(_ context.Context, c config.Config) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			v := value(c)
			if err := e.fail[name]; err != nil && v != value(*e.rl.current()) {
				return err
			}
			e.calls = append(e.calls, name+"="+v)
			return nil
		}}
	}
	e.rl.setSteps([]reloadStep{
		step("runtimes", runtimeKeys, false, func(c config.Config) string { return strings.Join(handlerNames(&c), ",") }),
		step("metrics", metricsKeys, false, func(c config.Config) string { return c.Metrics.Address }),
		step("images", imageKeys, true, func(c config.Config) string { return c.Image.RegistriesConf }),
	})
	return e
}

func (e *reloadEnv) write(toml string) {
	e.t.Helper()
	if err := os.WriteFile(e.path, []byte(toml), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *reloadEnv) got() (calls, notes []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls), slices.Clone(e.notes)
}

func TestReloadAppliesLiveKeysAndKeepsTheRest(t *testing.T) {
	e := newReloadEnv(t, "[server]\nlog_level = \"info\"\n")
	e.write(`[server]
log_level = "debug"
socket = "/run/elsewhere/podunit.sock"
[image]
registries_conf = "/etc/podunit/registries.conf"
[runtime.handlers.kata]
type = "runc"
path = "/usr/bin/kata-runc"
root = "/run/podunit/kata"
`)
	res, err := e.rl.reload(context.Background())
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	wantApplied := []string{"server.log_level", "image.registries_conf", "runtime.handlers"}
	if !reflect.DeepEqual(res.Applied, wantApplied) || !reflect.DeepEqual(res.Kept, []string{"server.socket"}) {
		t.Fatalf("result %+v, want applied %q kept [server.socket]", res, wantApplied)
	}
	cur := e.rl.current()
	if cur.Server.LogLevel != "debug" || cur.Image.RegistriesConf != "/etc/podunit/registries.conf" || len(cur.Runtime.Handlers) != 3 {
		t.Errorf("running configuration not reloaded: %+v", cur)
	}
	if cur.Server.Socket != config.Default().Server.Socket {
		t.Errorf("server.socket changed live to %q; it needs a restart", cur.Server.Socket)
	}
	if e.rl.level.Level() != slog.LevelDebug {
		t.Errorf("log level %v after reload, want debug", e.rl.level.Level())
	}
	calls, notes := e.got()
	// metrics.address did not change, so its step did not run
	if want := []string{"runtimes=crun,kata,runc", "images=/etc/podunit/registries.conf"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("steps ran %q, want %q", calls, want)
	}
	if len(notes) != 2 || !strings.HasPrefix(notes[0], "RELOADING=1 MONOTONIC_USEC=") || !strings.HasPrefix(notes[1], "READY=1") {
		t.Errorf("sd_notify %q, want RELOADING=1 with MONOTONIC_USEC, then READY=1", notes)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "need a restart") || !strings.Contains(logs, "server.socket") {
		t.Errorf("the kept key is not named in the log:\n%s", logs)
	}

	// the image step runs on every reload: registries.conf itself may change
	if _, err := e.rl.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls, _ := e.got(); len(calls) != 3 || calls[2] != "images=/etc/podunit/registries.conf" {
		t.Errorf("second reload ran %q", calls)
	}
}

func TestReloadRefusesABrokenFile(t *testing.T) {
	for name, toml := range map[string]string{
		"toml":       "[server]\nlog_level = \"debug\"\n[image\n",
		"validation": "[server]\nlog_level = \"loud\"\n",
		"unknown":    "[server]\nlog_levle = \"debug\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			e := newReloadEnv(t, "[metrics]\naddress = \"127.0.0.1:9100\"\n")
			before := e.rl.current()
			e.write(toml)
			_, err := e.rl.reload(context.Background())
			if err == nil {
				t.Fatal("a broken file was accepted")
			}
			if e.rl.current() != before || e.rl.level.Level() != slog.LevelInfo {
				t.Errorf("a refused reload changed the running configuration")
			}
			calls, notes := e.got()
			if len(calls) != 0 {
				t.Errorf("steps ran for a refused reload: %q", calls)
			}
			if len(notes) != 2 || !strings.HasPrefix(notes[1], "READY=1") || !strings.Contains(notes[1], "refused") {
				t.Errorf("sd_notify %q: READY=1 must end a refused reload too, with the reason", notes)
			}
			logs := e.logs.String()
			if !strings.Contains(logs, "reload refused") || !strings.Contains(logs, filepath.Base(e.path)) && name != "validation" {
				t.Errorf("log lacks the refusal and the file:\n%s", logs)
			}
		})
	}
}

// The admin socket serves before the services are wired: a reload then
// must not swap the configuration under components that never saw it.
func TestReloadRefusedWhileStarting(t *testing.T) {
	e := newReloadEnv(t, "")
	e.rl.setSteps(nil)
	before := e.rl.current()
	e.write("[server]\nlog_level = \"debug\"\n")
	if _, err := e.rl.reload(context.Background()); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("reload while starting: %v", err)
	}
	if e.rl.current() != before {
		t.Fatal("the running configuration changed")
	}
}

// A step that refuses leaves the configuration running as it was: the steps
// before it get the running configuration back.
func TestReloadUndoesEarlierStepsWhenOneFails(t *testing.T) {
	e := newReloadEnv(t, "")
	e.fail["images"] = errors.New("registries.conf: bad")
	e.write("[image]\nregistries_conf = \"/etc/podunit/registries.conf\"\n[metrics]\naddress = \"127.0.0.1:9100\"\n")
	before := e.rl.current()
	if _, err := e.rl.reload(context.Background()); err == nil || !strings.Contains(err.Error(), "registries.conf: bad") {
		t.Fatalf("reload: %v, want the image store's error", err)
	}
	if e.rl.current() != before {
		t.Fatal("the running configuration changed")
	}
	calls, _ := e.got()
	if want := []string{"metrics=127.0.0.1:9100", "metrics="}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("steps ran %q, want %q (applied, then undone)", calls, want)
	}
}

// Every key config marks live has a step (or the log level) that applies
// it: tagging a key live without teaching the reload would otherwise go
// unnoticed.
func TestReloadStepsCoverTheLiveKeys(t *testing.T) {
	if err := coverLiveKeys(reloadSteps(&services{})); err != nil {
		t.Fatal(err)
	}
	if err := coverLiveKeys(reloadSteps(&services{})[1:]); err == nil {
		t.Fatal("steps without the runtime handlers' cover the live keys")
	}
}

func TestSIGHUPReloads(t *testing.T) {
	e := newReloadEnv(t, "")
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.rl.reloadOnSignal(ctx, hup)
	e.write("[server]\nlog_level = \"warn\"\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.rl.current().Server.LogLevel != "warn" {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reload")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// `podunit reload` (ExecReload=) waits for the daemon's answer over the
// admin socket and fails when the reload was refused.
func TestReloadCommandOverAdminSocket(t *testing.T) {
	runDir := t.TempDir()
	e := newReloadEnv(t, fmt.Sprintf("[paths]\nrun_dir = %q\n", runDir))
	stop, err := serveAdmin(runDir, nil, e.rl, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	e.write(fmt.Sprintf("[paths]\nrun_dir = %q\n[server]\nlog_level = \"error\"\n", runDir))
	if code := runReload([]string{"--config", e.path}); code != 0 {
		t.Fatalf("podunit reload: exit %d", code)
	}
	if e.rl.current().Server.LogLevel != "error" {
		t.Fatal("podunit reload returned before the reload was applied")
	}
	// the daemon refuses (here: its own reading fails) and the command says so
	e.rl.read = func() (config.Config, error) { return config.Config{}, errors.New("podunit.toml:3: broken") }
	if code := runReload([]string{"--config", e.path}); code != 1 {
		t.Fatalf("podunit reload of a refused configuration: exit %d, want 1", code)
	}
	// a file the command itself cannot read is not sent to the daemon at all
	e.write("[paths\n")
	if code := runReload([]string{"--config", e.path}); code != 1 {
		t.Fatalf("podunit reload of a broken file: exit %d, want 1", code)
	}
}

func TestMetricsEndpointMovesAndFallsBack(t *testing.T) {
	reg, err := metrics.NewRegistry(metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var started []string
	m := &metricsEndpoint{start: func(addr string) (*metrics.Server, error) {
		started = append(started, addr)
		if addr == "127.0.0.1:1" {
			return nil, errors.New("listen: permission denied")
		}
		return metrics.Start(addr, reg, slog.New(slog.DiscardHandler))
	}}
	defer m.stop()
	if err := m.set("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := m.set("127.0.0.1:1"); err == nil {
		t.Fatal("an address that cannot listen was accepted")
	}
	if m.addr != "127.0.0.1:0" || m.srv == nil {
		t.Fatalf("after a failed move the endpoint is %q (%v), want the old one back", m.addr, m.srv)
	}
	if err := m.set(""); err != nil || m.srv != nil {
		t.Fatalf("turning metrics off: %v, server %v", err, m.srv)
	}
	if want := []string{"127.0.0.1:0", "127.0.0.1:1", "127.0.0.1:0"}; !reflect.DeepEqual(started, want) {
		t.Fatalf("started %q, want %q", started, want)
	}
}

// `podunit config --running` shows what the daemon runs with, which after a
// reload may differ from the files (keys waiting for a restart).
func TestConfigRunningAsksTheDaemon(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "podunit.sock")
	running := config.Default()
	running.Server.LogLevel = "debug"
	running.CNI.ConfDir = dir
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(gs, cri.New(cri.Deps{Config: func() *config.Config { return &running }, Systemd: systemdtest.New()}))
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cf := &cliFlags{configFlags: configFlags{path: filepath.Join(dir, "none.toml"), socket: sock}}
	c, err := runningConfig(cf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*c, running) {
		t.Fatalf("running configuration\n%+v\nwant\n%+v", *c, running)
	}
}

// The image store's live configuration pins the pause image and the
// operator's pinned_images, so a reload of either reaches it.
func TestImageLivePinsPauseAndPinnedImages(t *testing.T) {
	c := config.Default()
	c.Image.PinnedImages = []string{"quay.io/podunit/*"}
	if got := imageLive(&c).PinnedImages; !slices.Equal(got, []string{c.Image.PauseImage, "quay.io/podunit/*"}) {
		t.Fatalf("pinned = %q", got)
	}
}
