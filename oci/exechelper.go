package oci

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console"
)

// ExecHelperName is the hidden podunit subcommand that runs ExecHelperMain.
const ExecHelperName = "_exec-tty"

// A TTY exec cannot run the runtime in the foreground: runc then proxies
// the terminal itself and clears ONLCR on it after the command may
// already have written, so "\n" sometimes arrives as "\r\r\n". Detached
// (`exec -d --console-socket`) the terminal is untouched and its master
// comes to us, but the command is then reparented to the nearest child
// subreaper, and making podunit one would hand it every orphan of every
// tool it runs. So a short-lived helper, living exactly as long as the
// exec, is the subreaper: it runs the runtime, passes the master back on
// fd 3, waits for the command and writes "exit <code>" on fd 3.

// ExecHelperMain is the helper's body: args are --console-socket=PATH,
// --pid-file=PATH, optionally --size=HxW, then "--" and the runtime's
// command line (terminalExecArgv). It returns the helper's exit code.
func ExecHelperMain(args []string) int {
	// Not for the runtime: the control socket must close when the helper
	// ends, whatever the runtime leaves behind.
	unix.CloseOnExec(3)
	ctl := os.NewFile(3, "control")
	if err := execHelper(ctl, args); err != nil {
		fmt.Fprintf(os.Stderr, "exec helper: %v\n", err)
		return 1
	}
	return 0
}

// helperArgs is the helper's parsed command line.
type helperArgs struct {
	sock, pidFile string
	// size is the first terminal size, set the moment the master arrives,
	// before the runtime has usually exec'd the command.
	size *console.WinSize
	argv []string
}

func parseHelperArgs(args []string) (helperArgs, error) {
	var h helperArgs
	for i, a := range args {
		switch {
		case a == "--":
			h.argv = args[i+1:]
			if h.sock == "" || h.pidFile == "" || len(h.argv) == 0 {
				return h, errors.New("usage: --console-socket=PATH --pid-file=PATH [--size=HxW] -- RUNTIME-ARGV")
			}
			return h, nil
		case strings.HasPrefix(a, "--console-socket="):
			h.sock = strings.TrimPrefix(a, "--console-socket=")
		case strings.HasPrefix(a, "--pid-file="):
			h.pidFile = strings.TrimPrefix(a, "--pid-file=")
		case strings.HasPrefix(a, "--size="):
			var ws console.WinSize
			if _, err := fmt.Sscanf(a, "--size=%dx%d", &ws.Height, &ws.Width); err != nil {
				return h, fmt.Errorf("bad %s", a)
			}
			h.size = &ws
		default:
			return h, fmt.Errorf("unknown argument %q", a)
		}
	}
	return h, errors.New("no runtime command line after --")
}

func execHelper(ctl *os.File, args []string) error {
	h, err := parseHelperArgs(args)
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become subreaper: %w", err)
	}
	lis, err := console.Listen(h.sock)
	if err != nil {
		return err
	}
	defer lis.Close()
	argv, size, pidFile := h.argv, h.size, h.pidFile
	rt := exec.Command(argv[0], argv[1:]...)
	var rterr bytes.Buffer
	rt.Stderr = &rterr
	rt.Stdout = &rterr
	got := make(chan *os.File, 1)
	go func() {
		f, err := console.ReceiveMaster(lis)
		if err != nil {
			f = nil
		} else if size != nil {
			_ = console.SetWinSize(f, size.Height, size.Width)
		}
		got <- f
	}()
	if err := rt.Run(); err != nil {
		lis.Close()
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(rterr.String()))
	}
	var master *os.File
	select {
	case master = <-got:
	case <-time.After(10 * time.Second):
	}
	if master == nil {
		return errors.New("runtime sent no terminal")
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	conn, err := net.FileConn(ctl)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	uc := conn.(*net.UnixConn)
	if err := console.Send(uc, "pty\n", master); err != nil {
		return fmt.Errorf("send terminal: %w", err)
	}
	master.Close()
	// Reap everything reparented to us; the command's status is the
	// answer.
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for %d: %w", pid, err)
		}
		if wpid != pid {
			continue
		}
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		_, err = fmt.Fprintf(uc, "exit %d\n", code)
		return err
	}
}
