package stdio

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/console/consoletest"
)

// fakeRuntimeCreate plays `runc create --console-socket S --pid-file P`:
// it makes a terminal, starts the "init" (sh -c SCRIPT) on its slave,
// writes the init's PID and sends the master to S.
func fakeRuntimeCreate(args []string) int {
	sock, pidFile, script := args[0], args[1], args[2]
	master, slave, err := consoletest.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	slave.Close()
	if err := os.WriteFile(pidFile, []byte(fmt.Sprint(cmd.Process.Pid)), 0o644); err != nil {
		return 1
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := console.Send(c, "", master); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestParseArgsConsoleSocket(t *testing.T) {
	o, err := ParseArgs([]string{"--unit", "u.service", "--pid-file", "/p", "--console-socket", "/run/c/console.sock", "--", "runc"})
	if err != nil || o.ConsoleSocket != "/run/c/console.sock" {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range [][]string{
		{"--unit", "u", "--console-socket", "/s", "--", "runc"},                                           // no pid file: not unit mode
		{"--unit", "u", "--pid-file", "/p", "--console-socket", "/s", "--stdin-fifo", "/f", "--", "runc"}, // the terminal is stdin
	} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q) accepted", bad)
		}
	}
	for _, args := range [][]string{{relayFlag}, {relayFlag, ttyFlag}, {relayFlag, ttyFlag, tapFlag + "/d"}, {relayFlag, tapFlag + "/d"}} {
		if !isRelay(args) {
			t.Errorf("isRelay(%q) = false", args)
		}
	}
	for _, args := range [][]string{{relayFlag, "--x"}, {relayFlag, tapFlag + "/d", ttyFlag}, {"--unit"}} {
		if isRelay(args) {
			t.Errorf("isRelay(%q) = true", args)
		}
	}
}

// Without the node's relay the wrapper hands the terminal to a relay child
// in the unit: the container's output on its terminal reaches journald's
// stdout stream, and the child ends once the container's last process has
// closed the slave. The fake runtime's master is non-blocking
// (consoletest.Open), and the container writes only after the child has
// surely started reading (even a -race build): a child that took EAGAIN
// for the end lost everything.
func TestTerminalFallbackRelay(t *testing.T) {
	sock, ch := fakeJournal(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	consoleSock := filepath.Join(dir, "console.sock")
	cmd := exec.Command(os.Args[0], "_stdio", "--unit", "u.service", "--identifier", "c", "--socket", sock,
		"--pid-file", pidFile, "--console-socket", consoleSock, "--",
		os.Args[0], "_fakeruntime", consoleSock, pidFile, "sleep 1.5; echo on-the-terminal; tty")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("wrapper: %v, output on inherited fds: %q", err, out)
	}
	select {
	case lines := <-ch:
		if lines[2] != "6" || len(lines) < 9 || lines[7] != "on-the-terminal" || !strings.HasPrefix(lines[8], "/dev/pts/") {
			t.Fatalf("journal stream %q", lines)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal's output never reached journald")
	}
	if !WaitRelay(pidFile+".relay", 5*time.Second) {
		t.Error("terminal relay still running after the container's end")
	}
	if _, err := os.Stat(consoleSock); err == nil {
		t.Error("console socket left behind")
	}
}
