package streaming

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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

// ExecHelperMain is the helper's body: args are the runtime command line
// up to and including "exec" options, then the container ID and command;
// it inserts the detach and console options itself. It returns the
// process exit code for the helper.
func ExecHelperMain(args []string) int {
	ctl := os.NewFile(3, "control")
	if err := execHelper(ctl, args); err != nil {
		fmt.Fprintf(os.Stderr, "exec helper: %v\n", err)
		return 1
	}
	return 0
}

func execHelper(ctl *os.File, args []string) error {
	// The first terminal size is set the moment the master arrives,
	// before the runtime has usually exec'd the command.
	var size *WinSize
	if len(args) > 0 && strings.HasPrefix(args[0], "--size=") {
		var ws WinSize
		if _, err := fmt.Sscanf(args[0], "--size=%dx%d", &ws.Height, &ws.Width); err != nil {
			return fmt.Errorf("bad %s", args[0])
		}
		size, args = &ws, args[1:]
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become subreaper: %w", err)
	}
	i := indexOf(args, "exec")
	if i < 0 {
		return errors.New("no exec in runtime command line")
	}
	dir, err := os.MkdirTemp("", "podunit-exec-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "console.sock")
	pidFile := filepath.Join(dir, "pid")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return err
	}
	defer lis.Close()
	argv := append(append([]string{}, args[:i+1]...), "--detach", "--tty", "--console-socket", sock, "--pid-file", pidFile)
	argv = append(argv, args[i+1:]...)
	rt := exec.Command(argv[0], argv[1:]...)
	var rterr bytes.Buffer
	rt.Stderr = &rterr
	rt.Stdout = &rterr
	got := make(chan *os.File, 1)
	go func() {
		f, err := recvFD(lis)
		if err != nil {
			f = nil
		} else if size != nil {
			unix.IoctlSetWinsize(int(f.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
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
	if _, _, err := uc.WriteMsgUnix([]byte("pty\n"), unix.UnixRights(int(master.Fd())), nil); err != nil {
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

func indexOf(v []string, s string) int {
	for i, x := range v {
		if x == s {
			return i
		}
	}
	return -1
}

// recvFD accepts one connection and reads one descriptor sent with
// SCM_RIGHTS (runc and crun send the master this way).
func recvFD(lis *net.UnixListener) (*os.File, error) {
	conn, err := lis.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) == 0 {
		return nil, errors.New("no descriptor in console socket message")
	}
	for _, fd := range fds[1:] {
		unix.Close(fd)
	}
	unix.CloseOnExec(fds[0])
	return os.NewFile(uintptr(fds[0]), "pty-master"), nil
}

// runTTYHelper runs a TTY exec through the helper.
func runTTYHelper(ctx context.Context, helper []string, t Target, p ExecProcess) (int, error) {
	args := append([]string{}, helper[1:]...)
	argv := t.Runtime.ExecArgv(t.ID, p.Args)
	// The client sends its terminal size right after connecting; the
	// command should start with it (a shell reads it once at start).
	select {
	case s, ok := <-p.Resize:
		if ok && s.Width > 0 && s.Height > 0 {
			args = append(args, fmt.Sprintf("--size=%dx%d", s.Height, s.Width))
			if path, err := sizedProcess(ctx, t, p.Args, s); err == nil {
				defer os.Remove(path)
				argv = t.Runtime.ExecProcessArgv(t.ID, path)
			}
		}
	case <-time.After(100 * time.Millisecond):
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ours := os.NewFile(uintptr(fds[0]), "exec-control")
	theirs := os.NewFile(uintptr(fds[1]), "exec-control-peer")
	defer ours.Close()
	cmd := exec.Command(helper[0], append(args, argv...)...)
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
	stop := context.AfterFunc(ctx, func() { uc.Close(); cmd.Process.Kill() })
	defer stop()

	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		werr := <-waited
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, fmt.Errorf("exec: %s (%v)", strings.TrimSpace(stderr.String()), errors.Join(err, werr))
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		cmd.Process.Kill()
		<-waited
		return -1, fmt.Errorf("exec helper sent no terminal")
	}
	mfds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(mfds) == 0 {
		cmd.Process.Kill()
		<-waited
		return -1, fmt.Errorf("exec helper sent no terminal")
	}
	master, err := adopt(os.NewFile(uintptr(mfds[0]), "exec-pty"), "exec-pty")
	if err != nil {
		cmd.Process.Kill()
		<-waited
		return -1, err
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
		return -1, fmt.Errorf("exec: %s (%v)", strings.TrimSpace(stderr.String()), errors.Join(rerr, werr))
	}
	select {
	case <-copied:
	case <-time.After(drainTimeout):
	}
	return code, nil
}

// sizedProcess writes the process an exec runs with the container's own
// process spec (as the runtime would derive it from the bundle) plus a
// console size, so the terminal has its size before the command starts.
func sizedProcess(ctx context.Context, t Target, args []string, size WinSize) (string, error) {
	argv := t.Runtime.StateArgv(t.ID)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	if err != nil {
		return "", err
	}
	var st struct {
		Bundle string `json:"bundle"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Bundle == "" {
		return "", fmt.Errorf("runtime state has no bundle: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return "", err
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil || spec.Process == nil {
		return "", fmt.Errorf("bundle config: %v", err)
	}
	proc := *spec.Process
	proc.Args = args
	proc.Terminal = true
	proc.ConsoleSize = &specs.Box{Height: uint(size.Height), Width: uint(size.Width)}
	data, err := json.Marshal(&proc)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "podunit-exec-*.json")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
