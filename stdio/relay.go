package stdio

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/procstat"
	"github.com/podunit/podunit/unitcgroup"
)

// Why a relay: a container's stdout/stderr must be pipes. Many images
// open /dev/stdout or /dev/stderr by name (nginx logs to
// /var/log/nginx/error.log -> /dev/stderr), and open(2) of
// /proc/self/fd/N fails with ENXIO when fd N is a socket, as a journald
// stream is. So the container gets the write ends of two pipes, and a small
// process in the unit splices each pipe into its journald stream. It lives
// in the unit's cgroup, not in podunit: podunit can stop or restart without
// touching it, and it ends by itself when the container's last writer is
// gone (EOF on both pipes).

// relayFlag marks the re-executed relay child (a fallback when no cat(1)
// is installed); its fds 3..6 are stdout-pipe, stdout-stream, stderr-pipe,
// stderr-stream.
const relayFlag = "--relay-child"

// StartRelay makes fds 1 and 2 of this process the write ends of two new
// pipes and returns handOff, which gives the read ends to the relay:
// it connects two journald streams and registers both pairs with the
// node's relay, or starts relays in the unit. pidFile, if set, receives
// those relays' PIDs (the exit recorder waits for them to drain). When
// journald cannot be reached the inherited stdout/stderr take the
// streams' place.
//
// The split is for the start path: the pipes are all the runtime needs,
// so the wrapper runs `runc create` while handOff runs (journald's two
// accepts and the relay's reply, which took ~25 ms before runc even
// started). The wrapper runs the start step itself too, and what the
// container or the runtime writes before handOff is done waits in the
// pipes (a writer blocks only once a pipe's 64 KiB are full). The
// wrapper exits only after handOff: the read ends live in this process
// until the relay has them.
//
// Each stream is relayed by cat(1): stdin the pipe, stdout the socket. It
// is about 1 MB of memory per stream; re-executing podunit itself costs
// over 20 MB (every package's init runs), which per container would match
// the shims this design does without.
func StartRelay(o Options, pidFile string) (handOff func(), err error) {
	// The inherited stdout/stderr, kept for the case without journald
	// and for the wrapper's own warnings (fd 2 is about to be the
	// container's stderr pipe, whose lines would land in its CRI log).
	var inherited [2]int
	for i, fd := range []int{1, 2} {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			for _, c := range inherited[:i] {
				unix.Close(c)
			}
			return nil, fmt.Errorf("dup fd %d: %w", fd, err)
		}
		inherited[i] = d
	}
	var outP, errP [2]int
	if err := unix.Pipe2(outP[:], unix.O_CLOEXEC); err != nil {
		unix.Close(inherited[0])
		unix.Close(inherited[1])
		return nil, fmt.Errorf("pipe: %w", err)
	}
	if err := unix.Pipe2(errP[:], unix.O_CLOEXEC); err != nil {
		for _, c := range []int{inherited[0], inherited[1], outP[0], outP[1]} {
			unix.Close(c)
		}
		return nil, fmt.Errorf("pipe: %w", err)
	}
	if err := dupWriteEnds(outP[1], errP[1]); err != nil {
		for _, c := range []int{inherited[0], inherited[1], outP[0], outP[1], errP[0], errP[1]} {
			unix.Close(c)
		}
		return nil, err
	}
	unix.Close(outP[1])
	unix.Close(errP[1])
	return func() {
		handOffPipes(o, pidFile, outP[0], errP[0], [2]*os.File{
			os.NewFile(uintptr(inherited[0]), "inherited-stdout"),
			os.NewFile(uintptr(inherited[1]), "inherited-stderr"),
		})
	}, nil
}

// handOffPipes gives the read ends outPipe and errPipe to the node's
// relay, or to relays it starts in the unit. It owns and closes all four
// files; inherited[1] also takes its warnings. Failures only degrade
// logging, so they are reported there and never fail the container's start.
func handOffPipes(o Options, pidFile string, outPipe, errPipe int, inherited [2]*os.File) {
	warn := inherited[1]
	defer inherited[0].Close()
	defer inherited[1].Close()
	relaySocket := o.RelaySocket
	var stdout, stderr *os.File
	streams, err := connectStreams(o)
	if err == nil {
		stdout, stderr = os.NewFile(uintptr(streams[0]), "stdout-stream"), os.NewFile(uintptr(streams[1]), "stderr-stream")
	} else {
		// As without the wrapper: the unit's own stdout/stderr. The node's
		// relay sends to journald streams only, so relays in the unit
		// (cat) carry the pipes there.
		fmt.Fprintf(warn, "podunit _stdio: %v; relaying to the inherited stdout/stderr\n", err)
		relaySocket = ""
		stdout, stderr = inherited[0], inherited[1]
	}
	pairs := [][2]*os.File{
		{os.NewFile(uintptr(outPipe), "stdout-pipe"), stdout},
		{os.NewFile(uintptr(errPipe), "stderr-pipe"), stderr},
	}
	// (Closing an *os.File twice is harmless: in the fallback the streams
	// are the inherited files.)
	defer func() {
		for _, p := range pairs {
			p[0].Close()
			p[1].Close()
		}
	}()
	if relaySocket != "" {
		tapDir := ""
		if o.StdinFIFO != "" {
			tapDir = filepath.Dir(o.StdinFIFO)
		}
		lo := logrelay.LogOptions{Path: o.LogPath, UID: -1, GID: -1, NoJournal: o.NoJournal}
		err := logrelay.Register(relaySocket, o.RelayID, tapDir, unitCgroupDir(ownCgroupDir(o.CgroupRoot), o.CgroupLeaf), lo, outPipe, streams[0], errPipe, streams[1], 10*time.Second)
		if err == nil {
			return
		}
		fmt.Fprintf(warn, "podunit _stdio: %v; relaying from inside the unit instead\n", err)
	}
	var cmds []*exec.Cmd
	if o.StdinFIFO != "" {
		// An attachable container: its output must also reach attach
		// sessions byte for byte (a prompt without a newline never leaves
		// journald's line buffer), so it gets the relay with taps.
		cmd := exec.Command("/proc/self/exe", "_stdio", relayFlag, tapFlag+filepath.Dir(o.StdinFIFO))
		cmd.Args[0] = os.Args[0]
		cmd.ExtraFiles = []*os.File{pairs[0][0], pairs[0][1], pairs[1][0], pairs[1][1]}
		cmds = append(cmds, cmd)
	} else if cat, err := exec.LookPath("cat"); err == nil {
		for _, p := range pairs {
			cmd := exec.Command(cat)
			cmd.Stdin, cmd.Stdout = p[0], p[1]
			cmds = append(cmds, cmd)
		}
	} else {
		cmd := exec.Command("/proc/self/exe", "_stdio", relayFlag)
		cmd.Args[0] = os.Args[0]
		cmd.ExtraFiles = []*os.File{pairs[0][0], pairs[0][1], pairs[1][0], pairs[1][1]}
		cmds = append(cmds, cmd)
	}
	var pids []string
	for _, cmd := range cmds {
		// Not in the terminal's session: no SIGHUP/SIGINT meant for it.
		cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			// The pipes' read ends close with this function: the
			// container's writes then fail with EPIPE rather than block.
			fmt.Fprintf(warn, "podunit _stdio: start log relay: %v; the container's output is lost\n", err)
			continue
		}
		pids = append(pids, strconv.Itoa(cmd.Process.Pid))
		// They outlive this wrapper and are re-parented to systemd.
		_ = cmd.Process.Release()
	}
	if pidFile != "" && len(pids) > 0 {
		_ = os.WriteFile(pidFile, []byte(strings.Join(pids, " ")), 0o644)
	}
}

// connectStreams opens the stdout and stderr journald streams.
func connectStreams(o Options) ([2]int, error) {
	out, err := Connect(o.Socket, o.Identifier, o.Unit, PriorityStdout)
	if err != nil {
		return [2]int{}, err
	}
	errFd, err := Connect(o.Socket, o.Identifier, o.Unit, PriorityStderr)
	if err != nil {
		unix.Close(out)
		return [2]int{}, err
	}
	return [2]int{out, errFd}, nil
}

// ownCgroupDir is this process' cgroup directory (the unit's, or on v2
// the wrapper's leaf below it once EnterLeaf ran).
func ownCgroupDir(root string) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	path := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "1:name=systemd:"); ok {
			path = p
			break
		}
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	return unitcgroup.Dir(root, path)
}

// unitCgroupDir is the unit's cgroup given the wrapper's own: on v2 the
// wrapper already moved into its leaf (EnterLeaf), whose sibling holds the
// container, so the relay must search from the parent.
func unitCgroupDir(own, leaf string) string {
	if own != "" && leaf != "" && filepath.Base(own) == leaf {
		return filepath.Dir(own)
	}
	return own
}

// dupWriteEnds makes the pipes' write ends fds 1 and 2 (kept across exec).
func dupWriteEnds(out, errw int) error {
	if err := unix.Dup3(out, 1, 0); err != nil {
		return fmt.Errorf("dup stdout: %w", err)
	}
	if err := unix.Dup3(errw, 2, 0); err != nil {
		return fmt.Errorf("dup stderr: %w", err)
	}
	return nil
}

// tapFlag names the directory where the relay offers its output to attach
// sessions (logrelay.TapOut and logrelay.TapErr sockets).
const tapFlag = "--tap-dir="

// ttyFlag makes the relay child relay a terminal: fd 3 is its master,
// fd 4 the stdout stream.
const ttyFlag = "--tty"

// relayChildArgs parses the relay child's arguments after relayFlag.
func relayChildArgs(args []string) (tty bool, tapDir string, ok bool) {
	if len(args) > 0 && args[0] == ttyFlag {
		tty, args = true, args[1:]
	}
	switch {
	case len(args) == 0:
		return tty, "", true
	case len(args) == 1 && strings.HasPrefix(args[0], tapFlag):
		return tty, strings.TrimPrefix(args[0], tapFlag), true
	}
	return false, "", false
}

// isRelay reports whether args start the relay child.
func isRelay(args []string) bool {
	if len(args) == 0 || args[0] != relayFlag {
		return false
	}
	_, _, ok := relayChildArgs(args[1:])
	return ok
}

// relayMain copies both pipes (or the terminal) into their streams until
// every writer is gone, and with a tap directory also to every connected
// attach session.
func relayMain(args []string) int {
	debug.SetGCPercent(20)
	tty, tapDir, _ := relayChildArgs(args[1:])
	streams := [][2]int{{3, 4}, {5, 6}}
	if tty {
		// A master reads EIO once the container's last process holding
		// the slave is gone: copyLoop ends there.
		streams = streams[:1]
	}
	var wg sync.WaitGroup
	for i, fds := range streams {
		// The sender's file description may be non-blocking (a terminal
		// master opened O_NONBLOCK): a read would then end the copy with
		// EAGAIN before the container wrote anything.
		_ = unix.SetNonblock(fds[0], false)
		var t *logrelay.Tap
		if tapDir != "" {
			name := logrelay.TapOut
			if i == 1 {
				name = logrelay.TapErr
			}
			t = logrelay.NewTap(filepath.Join(tapDir, name))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if t == nil {
				Pump(fds[0], fds[1])
				return
			}
			defer t.Close()
			defer unix.Close(fds[0])
			defer unix.Close(fds[1])
			copyLoop(fds[0], fds[1], t.Send)
		}()
	}
	wg.Wait()
	return 0
}

// Pump moves bytes from the pipe in to the socket out until EOF, with
// splice(2) (no copy through user space) or read/write where splice is
// not supported. Write errors (journald gone) end the pump: the container
// then gets EPIPE rather than blocking forever on a full pipe.
func Pump(in, out int) {
	defer unix.Close(in)
	defer unix.Close(out)
	for {
		n, err := unix.Splice(in, nil, out, nil, 1<<20, unix.SPLICE_F_MOVE|unix.SPLICE_F_MORE)
		if err == nil && n == 0 {
			return
		}
		if err == nil {
			continue
		}
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if errors.Is(err, unix.EINVAL) {
			copyLoop(in, out, nil)
		}
		return
	}
}

// copyLoop moves bytes from in to out with read/write, handing each
// chunk to also (when set) after it reached out.
func copyLoop(in, out int, also func([]byte)) {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(in, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 || err != nil {
			return
		}
		for b := buf[:n]; len(b) > 0; {
			w, err := unix.Write(out, b)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			b = b[w:]
		}
		if also != nil {
			also(buf[:n])
		}
	}
}

// WaitRelay waits until the relay whose PID is in pidFile has exited
// (drained both pipes), at most d.
func WaitRelay(pidFile string, d time.Duration) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return true
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	deadline := time.Now().Add(d)
	for {
		running := false
		for _, pid := range pids {
			if st, err := procstat.Read("/proc", pid); err == nil && !st.Exited() {
				running = true
			}
		}
		if !running {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
