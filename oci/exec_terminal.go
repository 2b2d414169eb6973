package oci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/fdstore"
)

// firstSizeWait is how long a terminal exec waits for the client's first
// size, which clients send right after connecting: the command should
// start with it (a shell reads it once at start).
const firstSizeWait = 100 * time.Millisecond

// firstSize takes the client's first terminal size from resize, waiting
// at most firstSizeWait; nil when none came.
func firstSize(resize <-chan console.WinSize) *console.WinSize {
	select {
	case s, ok := <-resize:
		if ok && s.Width > 0 && s.Height > 0 {
			return &s
		}
	case <-time.After(firstSizeWait):
	}
	return nil
}

// terminal runs a terminal exec through the exec helper (exechelper.go),
// which runs terminalExecArgv and passes the terminal's master back, and
// relays the terminal to x.p's streams until the command has exited.
func (x *execRun) terminal(ctx context.Context, sock string, size *console.WinSize) (int, error) {
	helper := x.c.cfg.ExecHelper
	args := append(slices.Clone(helper[1:]), "--console-socket="+sock, "--pid-file="+x.pidFile)
	if size != nil {
		args = append(args, fmt.Sprintf("--size=%dx%d", size.Height, size.Width))
	}
	args = append(append(args, "--"), x.c.terminalExecArgv(x.id, x.procFile, sock, x.pidFile)...)

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s exec: %w", x.c.cfg.Name, err)
	}
	ours := os.NewFile(uintptr(fds[0]), "exec-control")
	theirs := os.NewFile(uintptr(fds[1]), "exec-control-peer")
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return -1, fmt.Errorf("%s exec: %w", x.c.cfg.Name, err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	cmd := exec.Command(helper[0], args...)
	cmd.ExtraFiles = []*os.File{theirs}
	errTail := &tailBuffer{max: 4096}
	cmd.Stderr = errTail
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return -1, fmt.Errorf("%s exec: start exec helper: %w", x.c.cfg.Name, err)
	}
	var werr error
	exited := make(chan struct{})
	go func() { werr = cmd.Wait(); close(exited) }()
	// The helper is the command's subreaper: the command's end (or its
	// kill) ends the helper, and with it the control connection.
	killed := x.killOnDone(ctx, cmd, exited)

	master, err := receiveMaster(uc)
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		if killed.Load() {
			return -1, x.killedErr(ctx)
		}
		return -1, fmt.Errorf("%s exec: %s (%w)", x.c.cfg.Name, strings.TrimSpace(errTail.String()), errors.Join(err, werr))
	}
	defer master.Close()
	stopRelay, copied := relayTerminal(master, x.p)
	defer stopRelay()

	line, rerr := bufio.NewReader(uc).ReadString('\n')
	<-exited
	code, perr := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "exit ")))
	if killed.Load() {
		if perr != nil {
			code = -1
		}
		return code, x.killedErr(ctx)
	}
	if rerr != nil || perr != nil || !strings.HasPrefix(line, "exit ") {
		return -1, fmt.Errorf("%s exec: %s (%w)", x.c.cfg.Name, strings.TrimSpace(errTail.String()), errors.Join(rerr, werr))
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
	// Non-blocking, so that closing it ends the copies.
	return fdstore.Adopt(f, "exec-pty")
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
	c := make(chan struct{})
	go func() {
		io.Copy(orDiscard(p.Stdout), master)
		close(c)
	}()
	return func() { close(done) }, c
}
