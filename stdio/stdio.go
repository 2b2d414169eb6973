// Package stdio is the ExecStart= wrapper of a container unit
// (`podunit _stdio`). It gives the container its stdout and stderr (pipes
// to the node's log relay, or two journald streams), runs the OCI
// runtime's create, names the created init the unit's main process and
// runs the runtime's start (Supervise).
//
// Without it systemd gives the service one stream for both fds
// (StandardError=journal dups stdout's), so stdout and stderr could not be
// told apart in the journal nor written to the CRI log with the right tag.
package stdio

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/fdstore"
	"github.com/podunit/podunit/mountns"
	"github.com/podunit/podunit/procstat"
)

// DefaultSocket is journald's stdout stream socket.
const DefaultSocket = "/run/systemd/journal/stdout"

// Syslog priorities of the two streams: operators tell stdout from stderr
// in the journal by them, and the level prefix is off so a container
// cannot forge one.
const (
	PriorityStdout = 6 // info
	PriorityStderr = 3 // err
)

// Options are the wrapper's flags.
type Options struct {
	Unit       string
	Identifier string
	Socket     string
	// StdinFIFO, when set, becomes the container's stdin (CRI stdin=true).
	StdinFIFO string
	// ConsoleSocket, for a tty container, is where the runtime sends the
	// terminal's master (its --console-socket); the wrapper hands it to
	// the relay, which then offers the output tap in the socket's
	// directory.
	ConsoleSocket string
	// CgroupLeaf, on a unified (v2) hierarchy, is the sub-cgroup of the
	// unit the wrapper moves into before exec'ing the runtime.
	CgroupLeaf string
	// CgroupRoot is where the cgroup hierarchy is mounted.
	CgroupRoot string
	// MountNS is the pin of podunit's mount namespace: the runtime runs
	// in it (it finds the root filesystem there), the wrapper itself in
	// the namespace systemd started it in.
	MountNS string
	// PIDFile is the runtime's --pid-file. When set, the wrapper runs the
	// runtime as a child instead of exec'ing it (see Supervise).
	PIDFile string
	// StartArgv is the runtime's start step (`runc start ID`), run once
	// systemd knows the created init as the unit's main process.
	StartArgv []string
	// RelaySocket is the node's log relay (package logrelay); RelayID the
	// container's name there. Without them, or when the relay does not
	// answer, per-container relay processes in the unit take its place.
	RelaySocket string
	RelayID     string
	// LogPath is the container's CRI log file, which the relay writes;
	// NoJournal keeps the output out of journald (the relay's choice: the
	// streams are opened anyway, for the fallback without a relay).
	LogPath   string
	NoJournal bool
	Argv      []string
}

// ParseArgs parses `--unit U --identifier I [--socket P] -- ARGV...`.
func ParseArgs(args []string) (Options, error) {
	fs := flag.NewFlagSet("_stdio", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o Options
	fs.StringVar(&o.Unit, "unit", "", "unit name journald attributes the lines to")
	fs.StringVar(&o.Identifier, "identifier", "", "SYSLOG_IDENTIFIER of the lines")
	fs.StringVar(&o.Socket, "socket", DefaultSocket, "journald stdout socket")
	fs.StringVar(&o.StdinFIFO, "stdin-fifo", "", "named pipe to use as stdin")
	fs.StringVar(&o.CgroupLeaf, "cgroup-leaf", "", "on cgroup v2, sub-cgroup of the unit to run the runtime in")
	fs.StringVar(&o.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup mount point")
	fs.StringVar(&o.MountNS, "mount-ns", "", "run the runtime in the mount namespace pinned here")
	fs.StringVar(&o.ConsoleSocket, "console-socket", "", "tty container: receive the terminal's master here")
	fs.StringVar(&o.PIDFile, "pid-file", "", "the runtime's pid file: name the container's init the unit's main process")
	fs.Func("start-arg", "one argument of the runtime's start step (repeated), run once systemd knows the init", func(a string) error {
		o.StartArgv = append(o.StartArgv, a)
		return nil
	})
	fs.StringVar(&o.RelaySocket, "relay-socket", "", "the node's log relay")
	fs.StringVar(&o.RelayID, "relay-id", "", "the container's id at the log relay")
	fs.StringVar(&o.LogPath, "log-path", "", "the CRI log file the relay writes")
	fs.BoolVar(&o.NoJournal, "no-journal", false, "the relay leaves journald out")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.Argv = fs.Args()
	if o.Unit == "" || len(o.Argv) == 0 {
		return o, errors.New("usage: _stdio --unit UNIT [--identifier ID] [--socket PATH] -- COMMAND [ARG...]")
	}
	if strings.ContainsAny(o.CgroupLeaf, "/") || o.CgroupLeaf == "." || o.CgroupLeaf == ".." {
		return o, fmt.Errorf("cgroup leaf %q must be a plain name", o.CgroupLeaf)
	}
	if o.ConsoleSocket != "" && (o.StdinFIFO != "" || o.PIDFile == "") {
		return o, errors.New("--console-socket needs --pid-file and excludes --stdin-fifo: the terminal is the container's stdin")
	}
	if len(o.StartArgv) > 0 && o.PIDFile == "" {
		return o, errors.New("--start-arg needs --pid-file: the start step follows the create")
	}
	if (o.RelaySocket == "") != (o.RelayID == "") {
		return o, errors.New("--relay-socket and --relay-id go together")
	}
	if o.Identifier == "" {
		o.Identifier = o.Unit
	}
	for _, s := range []string{o.Unit, o.Identifier} {
		if strings.ContainsAny(s, "\n\x00") {
			return o, fmt.Errorf("newline in %q would corrupt the stream header", s)
		}
	}
	return o, nil
}

// Header is journald's stream protocol preamble: identifier, unit id,
// priority, level prefix, forward to syslog, to kmsg, to console.
func Header(identifier, unit string, priority int) string {
	return fmt.Sprintf("%s\n%s\n%d\n0\n0\n0\n0\n", identifier, unit, priority)
}

// Connect opens one journald stream with the given header. It uses raw
// syscalls on purpose: the fd ends up as the container's stdout, and the
// non-blocking mode Go's net package would set lives in the shared file
// description — the container would then get EAGAIN on a busy journald.
func Connect(socket, identifier, unit string, priority int) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: socket}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect %s: %w", socket, err)
	}
	_ = unix.Shutdown(fd, unix.SHUT_RD)
	hdr := []byte(Header(identifier, unit, priority))
	for len(hdr) > 0 {
		n, err := unix.Write(fd, hdr)
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("write stream header: %w", err)
		}
		hdr = hdr[n:]
	}
	return fd, nil
}

// Setup replaces fds 1 and 2 with journald streams. When journald cannot be
// reached the unit's own stdio (systemd's journal stream, or /dev/null) is
// kept: a container must not fail to start because logging is degraded.
func Setup(o Options, warn io.Writer) {
	streams, err := connectStreams(o)
	if err != nil {
		fmt.Fprintf(warn, "podunit _stdio: %v; keeping inherited stdout/stderr\n", err)
		return
	}
	out, errFd := streams[0], streams[1]
	// dup3 without O_CLOEXEC: 1 and 2 must survive the exec.
	if err := unix.Dup3(out, 1, 0); err != nil {
		fmt.Fprintf(warn, "podunit _stdio: dup stdout: %v\n", err)
	}
	if err := unix.Dup3(errFd, 2, 0); err != nil {
		fmt.Fprintf(warn, "podunit _stdio: dup stderr: %v\n", err)
	}
	unix.Close(out)
	unix.Close(errFd)
}

// OpenStdin makes the FIFO at path the process's stdin. It is opened
// read-write: the container then holds a writer itself, so its stdin never
// reaches EOF while nobody is attached (an interactive shell started with
// stdin=true must keep running), and an attach can write into the FIFO.
func OpenStdin(path string) error {
	if err := unix.Mkfifo(path, 0o600); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mkfifo %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Dup3(fd, 0, 0); err != nil {
		return fmt.Errorf("dup stdin: %w", err)
	}
	return nil
}

// EnterLeaf moves the calling process from its (the unit's) cgroup into the
// sub-cgroup leaf, on a unified hierarchy only. cgroup v2 forbids processes
// in a cgroup whose controllers are delegated to children: left in the
// unit's cgroup, runc could not enable controllers for the container's
// cgroup beside it, falls back to a threaded subtree, and systemd then
// cannot spawn ExecStopPost there. On v1/hybrid nothing is to be done.
func EnterLeaf(root, leaf string) error {
	if leaf == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		return nil
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	own := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return fmt.Errorf("no cgroup v2 entry in /proc/self/cgroup")
	}
	dir := filepath.Join(root, own, leaf)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0o644)
}

// Supervise runs the runtime's create (or restore) as a child, makes the
// container's init the unit's main process, and then runs the runtime's
// start step, if any (see adopt).
func Supervise(mountNS, path string, argv []string, pidFile string, start []string, timeout time.Duration) int {
	if code := runRuntime(mountNS, path, argv); code != 0 {
		return code
	}
	return adopt(mountNS, pidFile, start, os.Getppid(), fdstore.Notify{}, timeout)
}

// adopt hands the created init to systemd and then starts it.
//
// The unit is Type=forking without a PID file: this wrapper is its
// ExecStart control process, and systemd learns the main PID from it
// (MAINPID=, NotifyAccess=exec) before the container runs. systemd can
// only collect the exit status of a main PID that is its own child, so
// the message waits until the init is: runc's init is runc's child and is
// re-parented to systemd when runc exits; crun leaves an intermediate
// process as its parent for a moment longer. The barrier makes sure
// systemd has processed the message before the start step lets the
// container run, so an init that exits at once is still the main process
// whose exit status systemd reports (and ExecStopPost records). The start
// step runs here, not as an ExecStartPost of its own: that cost a second
// fork, child setup and cgroup attach in systemd per start.
//
// parent is systemd's PID (this process's parent). Without
// $NOTIFY_SOCKET (a unit made by an older podunit, with PIDFile= and
// ExecStartPost=) systemd reads the PID file once this process exits.
func adopt(mountNS, pidFile string, start []string, parent int, notify fdstore.Notify, timeout time.Duration) int {
	pid := awaitInit(pidFile, parent, timeout)
	if !notify.Available() {
		if len(start) > 0 {
			fmt.Fprintln(os.Stderr, "podunit _stdio: no NOTIFY_SOCKET: the unit needs NotifyAccess=exec for the start step")
			return 1
		}
		return 0
	}
	if pid > 0 {
		if err := notify.MainPID(pid, timeout); err != nil {
			fmt.Fprintf(os.Stderr, "podunit _stdio: main pid %d: %v\n", pid, err)
			return 1
		}
	} else if len(start) > 0 {
		fmt.Fprintf(os.Stderr, "podunit _stdio: the container's init (%s) is gone before its start\n", pidFile)
		return 1
	}
	if len(start) == 0 {
		return 0
	}
	path, err := exec.LookPath(start[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "podunit _stdio:", err)
		return 127
	}
	return runRuntime(mountNS, path, start)
}

// runRuntime runs the runtime as a child of this process, in the mount
// namespace pinned at mountNS ("" for this process's), and returns its
// exit code (128 + the signal that killed it). It forks with syscall, not
// os/exec: os/exec's first start in a process probes clone(CLONE_PIDFD)
// with a throw-away child, ~1.4 ms of every container start on the bench
// machine (perf sched trace, 2026-12-05).
func runRuntime(mountNS, path string, argv []string) int {
	var pid int
	err := mountns.OnThread(mountNS, func() error {
		var err error
		pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: runtimeEnv(), Files: []uintptr{0, 1, 2}})
		return err
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "podunit _stdio: %s: %v\n", path, err)
		return 126
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) {
			fmt.Fprintf(os.Stderr, "podunit _stdio: wait for %s: %v\n", path, err)
			return 126
		}
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// runtimeEnv is this process's environment without $NOTIFY_SOCKET: with
// it runc and crun relay the container's own sd_notify, and their start
// step would wait for a READY=1 the container never sends.
func runtimeEnv() []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			out = append(out, kv)
		}
	}
	return out
}

// awaitInit returns the container's init (named in pidFile) once it is a
// child of parent, 0 once it is gone, after at most timeout (then the PID
// as it is: a started container is never failed here).
func awaitInit(pidFile string, parent int, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	pid := 0
	for {
		if pid == 0 {
			if b, err := os.ReadFile(pidFile); err == nil {
				if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 {
					pid = p
				}
			}
		}
		if pid > 0 {
			ppid, alive := parentOf(pid)
			if !alive {
				return 0
			}
			if ppid == parent {
				return pid
			}
		}
		if time.Now().After(deadline) {
			return pid
		}
		time.Sleep(time.Millisecond)
	}
}

// parentOf returns pid's parent; alive is false when the process no
// longer exists.
func parentOf(pid int) (ppid int, alive bool) {
	st, err := procstat.Read("/proc", pid)
	if err != nil {
		return 0, false
	}
	return st.PPID, true
}

// Main is `podunit _stdio`: it only returns on failure.
func Main(args []string) int {
	if isRelay(args) {
		return relayMain(args)
	}
	o, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "podunit _stdio:", err)
		return 2
	}
	path, err := exec.LookPath(o.Argv[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "podunit _stdio:", err)
		return 127
	}
	if err := EnterLeaf(o.CgroupRoot, o.CgroupLeaf); err != nil {
		fmt.Fprintln(os.Stderr, "podunit _stdio: cgroup leaf:", err)
		return 1
	}
	if o.StdinFIFO != "" {
		if err := OpenStdin(o.StdinFIFO); err != nil {
			fmt.Fprintln(os.Stderr, "podunit _stdio:", err)
			return 1
		}
	}
	if o.ConsoleSocket != "" {
		return superviseTerminal(o, path, os.Stderr)
	}
	if o.PIDFile != "" {
		// Unit mode: pipes through a relay, runtime as a supervised child,
		// the pipes handed to the relay while the runtime creates.
		handOff, err := StartRelay(o, o.PIDFile+".relay")
		if err != nil {
			fmt.Fprintln(os.Stderr, "podunit _stdio:", err)
			return 1
		}
		handedOff := make(chan struct{})
		go func() {
			defer close(handedOff)
			handOff()
		}()
		code := Supervise(o.MountNS, path, o.Argv, o.PIDFile, o.StartArgv, 30*time.Second)
		<-handedOff
		return code
	}
	Setup(o, os.Stderr)
	err = mountns.OnThread(o.MountNS, func() error { return syscall.Exec(path, o.Argv, os.Environ()) })
	fmt.Fprintf(os.Stderr, "podunit _stdio: exec %s: %v\n", path, err)
	return 126
}
