package streaming

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/oci"
)

// drainTimeout bounds how long output is still copied after the command
// has exited: a process it left in the background may hold the terminal
// open forever.
const drainTimeout = 2 * time.Second

// firstSizeWait is how long a terminal exec waits for the client's first
// size, which clients send right after connecting: the command should
// start with it (a shell reads it once at start).
const firstSizeWait = 100 * time.Millisecond

// PrepareTerminal prepares the terminal exec of a process in the
// container; size is the client's first terminal size, nil when none came.
type PrepareTerminal func(size *WinSize) (*oci.TerminalExec, error)

// RunTerminal runs a terminal exec through the exec helper (helper is its
// command line: podunit's binary and ExecHelperName) and relays the
// terminal to p's streams until the command has exited.
func RunTerminal(ctx context.Context, helper []string, p ExecProcess, prepare PrepareTerminal) (int, error) {
	var size *WinSize
	select {
	case s, ok := <-p.Resize:
		if ok && s.Width > 0 && s.Height > 0 {
			size = &s
		}
	case <-time.After(firstSizeWait):
	}
	te, err := prepare(size)
	if err != nil {
		return -1, err
	}
	defer te.Close()
	args := append([]string{}, helper[1:]...)
	args = append(args, "--console-socket="+te.ConsoleSocket, "--pid-file="+te.PidFile)
	if size != nil {
		args = append(args, fmt.Sprintf("--size=%dx%d", size.Height, size.Width))
	}
	args = append(append(args, "--"), te.Argv...)

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ours := os.NewFile(uintptr(fds[0]), "exec-control")
	theirs := os.NewFile(uintptr(fds[1]), "exec-control-peer")
	defer ours.Close()
	cmd := exec.Command(helper[0], args...)
	cmd.ExtraFiles = []*os.File{theirs}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return -1, fmt.Errorf("start exec helper: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	conn, err := net.FileConn(ours)
	if err != nil {
		cmd.Process.Kill()
		<-waited
		return -1, err
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	// The helper is the command's subreaper: killing it ends the command's
	// wait, and the command itself goes with its terminal's hangup.
	stop := context.AfterFunc(ctx, func() { uc.Close(); cmd.Process.Kill() })
	defer stop()

	master, err := receiveMaster(uc)
	if err != nil {
		cmd.Process.Kill()
		werr := <-waited
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, fmt.Errorf("exec: %s (%w)", strings.TrimSpace(stderr.String()), errors.Join(err, werr))
	}
	defer master.Close()

	stopRelay, copied := relayTerminal(master, p)
	defer stopRelay()

	line, rerr := bufio.NewReader(uc).ReadString('\n')
	werr := <-waited
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	code, perr := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "exit ")))
	if rerr != nil || perr != nil || !strings.HasPrefix(line, "exit ") {
		return -1, fmt.Errorf("exec: %s (%w)", strings.TrimSpace(stderr.String()), errors.Join(rerr, werr))
	}
	select {
	case <-copied:
	case <-time.After(drainTimeout):
	}
	return code, nil
}

// receiveMaster reads the helper's "pty" message carrying the terminal's
// master.
func receiveMaster(uc *net.UnixConn) (*os.File, error) {
	msg, f, err := console.Recv(uc, "exec-pty")
	if err != nil {
		if msg == "" {
			return nil, errors.New("exec helper ended without a terminal")
		}
		return nil, fmt.Errorf("exec helper sent no terminal: %w", err)
	}
	return adopt(f, "exec-pty")
}

// relayTerminal serves one exec's terminal: resize requests, stdin into
// the master and the master's output to stdout. copied closes once the
// output ended (EIO when the last holder of the slave has exited); stop
// ends the resize loop.
func relayTerminal(master *os.File, p ExecProcess) (stop func(), copied <-chan struct{}) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s, ok := <-p.Resize:
				if !ok {
					return
				}
				_ = console.SetWinSize(master, s.Height, s.Width)
			case <-done:
				return
			}
		}
	}()
	if p.Stdin != nil {
		go io.Copy(master, p.Stdin)
	}
	out := p.Stdout
	if out == nil {
		out = io.Discard
	}
	c := make(chan struct{})
	go func() {
		io.Copy(out, master)
		close(c)
	}()
	return func() { close(done) }, c
}
