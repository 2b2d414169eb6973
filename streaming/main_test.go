package streaming

import (
	"context"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/systemd/systemdtest"
)

// Ensure starts the unit when nothing answers, leaves a session process
// with the configured listen address alone, and replaces one listening
// with another configuration.
func TestEnsure(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "stream.sock")
	reg := NewRegistry()
	srv := startServer(t, Deps{Containers: reg, Pods: reg, Exec: reg})
	var stop context.CancelFunc
	// The fake's "process": a control socket answering with the listen
	// configuration the unit was started with.
	run := func(u *systemdtest.Unit) systemd.JobResult {
		argv := execArgs(u)
		i := slices.Index(argv, "--address")
		l, err := ListenControl(socket)
		if err != nil || i < 0 {
			t.Errorf("start: %v (argv %q)", err, argv)
			return systemd.JobFailed
		}
		var ctx context.Context
		ctx, stop = context.WithCancel(context.Background())
		go (&Control{Srv: srv, Reg: reg, Listen: ListenKey(Config{Address: argv[i+1]}), Logger: slog.Default()}).Serve(ctx, l)
		return systemd.JobDone
	}
	sd := systemdtest.New()
	sd.StartFunc = run
	sd.StopFunc = func(*systemdtest.Unit) systemd.JobResult {
		stop()
		time.Sleep(50 * time.Millisecond)
		return systemd.JobDone
	}
	t.Cleanup(func() {
		if stop != nil {
			stop()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ensure := func(addr string) {
		t.Helper()
		cfg := Config{Address: addr}
		if err := Ensure(ctx, sd, UnitProperties([]string{"/usr/bin/podunit", HelperName}, socket, "/run/r.sock", cfg), socket, cfg, slog.Default()); err != nil {
			t.Fatal(err)
		}
		if listen, err := Ping(socket, time.Second); err != nil || listen != ListenKey(cfg) {
			t.Fatalf("after Ensure: %q, %v", listen, err)
		}
	}
	ensure("127.0.0.1:0")
	ensure("127.0.0.1:0")
	ensure("127.0.0.1:10250")
	if got, want := strings.Join(sd.Calls, ","), "start "+UnitName+",stop "+UnitName+",start "+UnitName; got != want {
		t.Errorf("systemd calls %s, want %s", got, want)
	}
	u := sd.Units[UnitName]
	if u.Props["Restart"] != "always" || u.Props["Type"] != "notify" {
		t.Errorf("unit properties %v", u.Props)
	}
	argv := execArgs(u)
	if want := []string{"/usr/bin/podunit", HelperName, "--socket", socket, "--address", "127.0.0.1:10250", "--relay-socket", "/run/r.sock"}; !slices.Equal(argv, want) {
		t.Errorf("ExecStart %q, want %q", argv, want)
	}
}

// execArgs is the argv of a fake unit's ExecStart (go-systemd's execStart
// is unexported).
func execArgs(u *systemdtest.Unit) []string {
	return reflect.ValueOf(u.Props["ExecStart"]).Index(0).FieldByName("Args").Interface().([]string)
}
