package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
)

// Exec implements Runtime. The runtime always runs in the foreground, so its
// exit status is the process's. Without a terminal it hands its stdio to the
// process; with one, crun sends the pty master through a console socket and
// runc relays its pty through a pty of podunit's (see hostPty).
func (c *CLI) Exec(ctx context.Context, id string, p ExecProcess) (int, error) {
	if len(p.Process.Args) == 0 {
		return -1, invalid("exec", "no command")
	}
	if err := os.MkdirAll(c.cfg.ExecDir, 0o700); err != nil {
		return -1, fmt.Errorf("exec dir: %w", err)
	}
	dir, err := os.MkdirTemp(c.cfg.ExecDir, "exec-")
	if err != nil {
		return -1, fmt.Errorf("exec dir: %w", err)
	}
	defer os.RemoveAll(dir)
	procJSON, err := json.Marshal(p.Process)
	if err != nil {
		return -1, fmt.Errorf("encode process: %w", err)
	}
	x := execRun{c: c, id: id, p: p, procFile: filepath.Join(dir, "process.json"), pidFile: filepath.Join(dir, "pid")}
	if err := os.WriteFile(x.procFile, procJSON, 0o600); err != nil {
		return -1, err
	}
	if p.Process.Terminal {
		return x.terminal(ctx, filepath.Join(dir, "console.sock"))
	}
	return x.piped(ctx)
}

type execRun struct {
	c                 *CLI
	id                string
	p                 ExecProcess
	procFile, pidFile string
}

func (x *execRun) piped(ctx context.Context) (int, error) {
	argv := x.c.execArgv(x.id, x.procFile, x.pidFile, "")
	cmd := exec.Command(argv[0], argv[1:]...)
	errTail := &tailBuffer{max: 4096}
	cmd.Stdin = x.p.Stdin
	cmd.Stdout = orDiscard(x.p.Stdout)
	cmd.Stderr = io.MultiWriter(orDiscard(x.p.Stderr), errTail)
	// A process that leaves a daemon holding its stdout must not hang us
	// after it exits.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("%s exec: %w", x.c.cfg.Name, err)
	}
	var werr error
	exited := make(chan struct{})
	go func() { werr = cmd.Wait(); close(exited) }()
	killed := x.killOnDone(ctx, exited)
	<-exited
	return x.result(ctx, exitStatus(cmd, werr), werr, errTail, killed.Load())
}

// killOnDone: the runtime does not kill its process when it dies itself, so
// on timeout kill the exec'd process, which makes a foreground runtime return.
func (x *execRun) killOnDone(ctx context.Context, exited <-chan struct{}) *atomic.Bool {
	var killed atomic.Bool
	go func() {
		select {
		case <-exited:
		case <-ctx.Done():
			killed.Store(true)
			killByPidFile(x.pidFile, exited)
		}
	}()
	return &killed
}

func (x *execRun) result(ctx context.Context, code int, werr error, errTail *tailBuffer, killed bool) (int, error) {
	if killed {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return code, fmt.Errorf("exec in %s: command %q timed out: %w", x.id, x.p.Process.Args, errdefs.ErrDeadline)
		}
		return code, fmt.Errorf("exec in %s: %w", x.id, ctx.Err())
	}
	if werr != nil && !isExit(werr) {
		return code, fmt.Errorf("%s exec: %w", x.c.cfg.Name, werr)
	}
	if code != 0 {
		if _, err := os.Stat(x.pidFile); err != nil {
			// No process was started: the code and message are the runtime's.
			return code, classify(x.c.cfg.Name+" exec", errTail.String(), werr)
		}
	}
	return code, nil
}

func (x *execRun) terminal(ctx context.Context, socketPath string) (int, error) {
	if x.c.flavor == FlavorRunc {
		return x.hostPty(ctx)
	}
	console, err := NewConsoleSocket(socketPath)
	if err != nil {
		return -1, err
	}
	defer console.Close()
	done := make(chan struct{})
	defer close(done)

	recvCtx, cancelRecv := context.WithCancel(context.Background())
	defer cancelRecv()
	var ioWG sync.WaitGroup
	masterCh := make(chan *os.File, 1)
	go func() {
		m, err := console.ReceiveMaster(recvCtx)
		if err != nil {
			masterCh <- nil
			return
		}
		pumpTerminal(m, x.p, done, &ioWG)
		masterCh <- m
	}()

	argv := x.c.execArgv(x.id, x.procFile, x.pidFile, console.Path())
	cmd := exec.Command(argv[0], argv[1:]...)
	errTail := &tailBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = errTail, errTail
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("%s exec: %w", x.c.cfg.Name, err)
	}
	var werr error
	exited := make(chan struct{})
	go func() { werr = cmd.Wait(); close(exited) }()
	killed := x.killOnDone(ctx, exited)
	<-exited

	// The runtime sent the master before it returned; give a late accept a
	// moment, then stop waiting.
	stop := time.AfterFunc(time.Second, cancelRecv)
	master := <-masterCh
	stop.Stop()
	drainTerminal(master, &ioWG)
	return x.result(ctx, exitStatus(cmd, werr), werr, errTail, killed.Load())
}

// hostPty: runc passes a console socket only to detached execs, whose exit
// status podunit could not collect. In the foreground runc allocates the
// container's pty itself and relays it to its own stdio; giving it a pty of
// ours as stdio and controlling terminal keeps resizing possible: a size set
// on our master reaches runc as SIGWINCH, and runc copies it to the
// container's pty.
func (x *execRun) hostPty(ctx context.Context) (int, error) {
	master, slave, err := openPty()
	if err != nil {
		return -1, fmt.Errorf("exec terminal: %w", err)
	}
	defer master.Close()
	if sz := x.p.Process.ConsoleSize; sz != nil {
		_ = ResizeConsole(master, TerminalSize{Width: uint16(sz.Width), Height: uint16(sz.Height)})
	}
	argv := x.c.execArgv(x.id, x.procFile, x.pidFile, "")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	slave.Close()
	if err != nil {
		return -1, fmt.Errorf("%s exec: %w", x.c.cfg.Name, err)
	}
	done := make(chan struct{})
	defer close(done)
	var ioWG sync.WaitGroup
	// runc's own errors arrive on the pty too; keep their tail.
	errTail := &tailBuffer{max: 4096}
	p := x.p
	p.Stdout = io.MultiWriter(orDiscard(p.Stdout), errTail)
	pumpTerminal(master, p, done, &ioWG)

	var werr error
	exited := make(chan struct{})
	go func() { werr = cmd.Wait(); close(exited) }()
	killed := x.killOnDone(ctx, exited)
	<-exited
	drainTerminal(master, &ioWG)
	return x.result(ctx, exitStatus(cmd, werr), werr, errTail, killed.Load())
}

// drainTerminal lets the output copy finish: it ends with EIO once the last
// slave fd closes, but a background child keeping one open must not hold the
// exec forever.
func drainTerminal(master *os.File, ioWG *sync.WaitGroup) {
	if master == nil {
		return
	}
	drained := make(chan struct{})
	go func() { ioWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
	}
	master.Close()
	ioWG.Wait()
}

// openPty allocates a pty pair with the slave in raw mode, so bytes pass
// through unchanged (the container's own pty does line discipline).
func openPty() (master, slave *os.File, retErr error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	defer func() {
		if retErr != nil {
			master.Close()
		}
	}()
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	slave = os.NewFile(uintptr(sfd), name)
	t, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
	if err == nil {
		t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		t.Oflag &^= unix.OPOST
		t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		t.Cflag &^= unix.CSIZE | unix.PARENB
		t.Cflag |= unix.CS8
		err = unix.IoctlSetTermios(sfd, unix.TCSETS, t)
	}
	if err != nil {
		slave.Close()
		return nil, nil, fmt.Errorf("raw pty: %w", err)
	}
	return master, slave, nil
}
