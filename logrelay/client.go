// Package logrelay is podunit's node-wide log relay: one process
// (`podunit _logrelay`, transient unit podunit-logrelay.service) moves
// every container's stdout and stderr from the pipes the container writes
// to into the journald streams its unit opened.
//
// Why a relay at all, and why one per node: a container's stdout must be
// a pipe (images open /dev/stdout by name, and open(2) of a socket fails
// with ENXIO), journald only takes sockets, and the process in between
// must not be podunit (output would stop while podunit restarts) nor live
// in the container's unit (systemd SIGKILLs the unit's other processes the
// moment the container's main process exits, cutting its last output).
// The relay runs in its own unit; its pipes and streams sit in systemd's
// fd store, so a relay restart loses nothing either.
//
// The unit's ExecStart= wrapper (package stdio) opens the two journald
// streams from inside the container's unit (journald attributes them, and
// the unit's LogExtraFields=, to the unit), makes the pipes and hands the
// read ends and the streams to the relay with Register. The unit's
// ExecStopPost= helper (package exitrec) calls Wait before it records the
// exit, so podunit reads a complete log once it sees the record.
package logrelay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/errdefs"
)

// UnitName is the relay's transient service.
const UnitName = "podunit-logrelay.service"

// Streams of one container, in the order Register passes them.
var streamNames = [2]string{"out", "err"}

// ValidID reports whether id can name a relay (and its fd store entries):
// 1 to 128 of [A-Za-z0-9_.-], not starting with one of "_.-". (Not a
// regexp: compiling {0,127} cost the helper ~1.5 ms at every start.)
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// Replies of the relay.
const (
	replyOK      = "OK"
	replyDone    = "DONE"
	replyUnknown = "UNKNOWN"
	replyTimeout = "TIMEOUT"
)

// ErrUnknown: the relay has no record of that container (never registered,
// or finished long ago).
var ErrUnknown = errors.New("container not known to the log relay")

// Register hands a container's output to the relay: for stdout and stderr
// the pipe's read end and the journald stream. tapDir, when set, makes
// the relay offer the output to attach sessions there (TapOut and
// TapErr). The descriptors are the caller's to close afterwards.
//
// cgroupDir is the container unit's cgroup directory: the relay sends the
// output as the unit's processes it finds there (see pump.go); the caller
// must be one of them.
//
// The relay writes the output to the CRI log file in lo (none when
// lo.Path is empty) and, unless lo.NoJournal, to the journald streams.
func Register(socket, id, tapDir, cgroupDir string, lo LogOptions, outPipe, outStream, errPipe, errStream int, timeout time.Duration) error {
	msg, err := registerMsg("REGISTER", id, tapDir, cgroupDir, lo)
	if err != nil {
		return err
	}
	return register(socket, msg, unix.UnixRights(outPipe, outStream, errPipe, errStream), timeout)
}

// registerMsg is the text of REGISTER and REGISTER-TTY: the container's
// id, then one line each for tap dir, cgroup dir, log path and
// "<uid> <gid> <journal 1|0>".
func registerMsg(verb, id, tapDir, cgroupDir string, lo LogOptions) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("log relay: bad container id %q", id)
	}
	if strings.ContainsAny(tapDir+cgroupDir+lo.Path, "\n\x00") {
		return "", fmt.Errorf("log relay: bad path %q / %q / %q", tapDir, cgroupDir, lo.Path)
	}
	journal := 1
	if lo.NoJournal {
		journal = 0
	}
	return fmt.Sprintf("%s %s\n%s\n%s\n%s\n%d %d %d", verb, id, tapDir, cgroupDir, lo.Path, lo.UID, lo.GID, journal), nil
}

// RegisterTerminal hands a tty container's terminal to the relay: master
// is the terminal's master, outStream the journald stdout stream. The
// relay holds the master for the container's life (and across its own
// restarts), writes what it reads as stdout, offers it on the TapOut tap
// in tapDir and gives the master to attach sessions (Client.Terminal).
func RegisterTerminal(socket, id, tapDir, cgroupDir string, lo LogOptions, master, outStream int, timeout time.Duration) error {
	msg, err := registerMsg("REGISTER-TTY", id, tapDir, cgroupDir, lo)
	if err != nil {
		return err
	}
	return register(socket, msg, unix.UnixRights(master, outStream), timeout)
}

func register(socket, msg string, rights []byte, timeout time.Duration) error {
	reply, err := call(socket, msg, rights, timeout)
	if err != nil {
		return err
	}
	if reply != replyOK {
		return fmt.Errorf("log relay: %s", reply)
	}
	return nil
}

// Wait returns once the relay has moved all of the container's output
// (both pipes at EOF), ErrUnknown when it never had it, or an error after
// timeout. The caller should be a process of the container's unit (its
// ExecStopPost helper): the relay sends the last output as the caller.
func Wait(socket, id string, timeout time.Duration) error {
	if !ValidID(id) {
		return fmt.Errorf("log relay: bad container id %q", id)
	}
	msg := "WAIT " + id + " " + strconv.FormatInt(timeout.Milliseconds(), 10)
	reply, err := call(socket, msg, nil, timeout+2*time.Second)
	if err != nil {
		return err
	}
	switch reply {
	case replyDone:
		return nil
	case replyUnknown:
		return ErrUnknown
	case replyTimeout:
		return fmt.Errorf("log relay: container %s still has output in flight after %s", id, timeout)
	}
	return fmt.Errorf("log relay: %s", reply)
}

// LogOptions say where a container's output goes besides its taps.
type LogOptions struct {
	// Path is the CRI log file (the kubelet's log_path).
	Path string
	// UID and GID own a new log file and new directories above it; -1
	// takes the owner of the nearest existing directory.
	UID, GID int
	// NoJournal keeps the output out of journald.
	NoJournal bool
}

// Client is podunit's side of the relay's CRI log files.
type Client struct{ Socket string }

// Flush returns once the relay has written all of the container's output
// to its CRI log file (both pipes at EOF), or an error after ctx's
// deadline. A container the relay does not know (relayed from inside its
// unit, or finished long ago) has nothing in flight: nil. Unlike Wait it
// does not make the caller the process the last journald lines are sent
// as.
func (c Client) Flush(ctx context.Context, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("log relay: bad container id %q", id)
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return fmt.Errorf("log relay flush %s: %w", id, context.DeadlineExceeded)
	}
	reply, err := call(c.Socket, "FLUSH "+id+" "+strconv.FormatInt(timeout.Milliseconds(), 10), nil, timeout+2*time.Second)
	if err != nil {
		return err
	}
	switch reply {
	case replyDone, replyUnknown:
		return nil
	case replyTimeout:
		return fmt.Errorf("log relay: container %s still has output in flight after %s: %w", id, timeout.Round(time.Millisecond), context.DeadlineExceeded)
	}
	return fmt.Errorf("log relay: %s", reply)
}

// Reopen makes the relay write the container's output to a new file at
// its log path (the kubelet renamed the old one); it returns once the
// switch is done. A container that runs on after closing both its
// streams has no writer left: the relay forgot it, and Reopen only makes
// sure a file is at path, as after any reopen (the kubelet reads the path
// and rotates again). errdefs.ErrNotFound: the relay writes no log file
// for the container and path is empty.
func (c Client) Reopen(id, path string) error {
	err := c.request("REOPEN", id, "log file")
	if !errors.Is(err, errdefs.ErrNotFound) || path == "" {
		return err
	}
	f, err := openLogFile(path, -1, -1)
	if err != nil {
		return fmt.Errorf("log relay: container %s has no output left; new log file: %w", id, err)
	}
	return f.Close()
}

// request sends "<verb> <id>" and maps the relay's answer: OK is nil,
// UNKNOWN is errdefs.ErrNotFound (the relay holds no <what> of that
// container).
func (c Client) request(verb, id, what string) error {
	if !ValidID(id) {
		return fmt.Errorf("log relay: bad container id %q", id)
	}
	reply, err := call(c.Socket, verb+" "+id, nil, 10*time.Second)
	if err != nil {
		return err
	}
	switch reply {
	case replyOK:
		return nil
	case replyUnknown:
		return fmt.Errorf("log relay: no %s of container %s: %w", what, id, errdefs.ErrNotFound)
	}
	return fmt.Errorf("log relay: %s", reply)
}

// Terminal returns a tty container's terminal master, which the relay
// holds: attach writes the client's input to it and sets its size; the
// relay alone reads it. The caller closes it. errdefs.ErrNotFound: the
// relay holds no terminal of that container.
func (c Client) Terminal(id string) (*os.File, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("log relay: bad container id %q", id)
	}
	conn, err := dial(c.Socket, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("TERMINAL " + id)); err != nil {
		return nil, fmt.Errorf("log relay: send: %w", err)
	}
	reply, f, err := console.Recv(conn, "pty-master-"+id)
	if f != nil && reply == replyOK {
		return f, nil
	}
	if f != nil {
		f.Close()
	}
	if reply == replyUnknown {
		return nil, fmt.Errorf("log relay: no terminal of container %s: %w", id, errdefs.ErrNotFound)
	}
	if reply != "" {
		return nil, fmt.Errorf("log relay: %s", reply)
	}
	return nil, fmt.Errorf("log relay: terminal: %w", err)
}

// Hangup closes a tty container's terminal for good (stdin_once: the
// session that had stdin ended): once the caller has closed its own copies
// the container's process sees the hangup (SIGHUP, then EIO), as with
// containerd, whose shim closes the console when stdin ends.
// errdefs.ErrNotFound: the relay holds no terminal of that container.
func (c Client) Hangup(id string) error {
	return c.request("HANGUP", id, "terminal")
}

// Stats are the relay's CRI log file figures since it started.
type Stats struct {
	// FailingStreams cannot write their CRI log file now.
	FailingStreams int64
	// NoSpaceErrors and OtherErrors count failed writes of a chunk:
	// ENOSPC/EDQUOT (the log file system is full), and anything else.
	NoSpaceErrors, OtherErrors uint64
}

// Stats asks the relay for its figures.
func (c Client) Stats(timeout time.Duration) (Stats, error) {
	reply, err := call(c.Socket, "STATS", nil, timeout)
	if err != nil {
		return Stats{}, err
	}
	var st Stats
	if _, err := fmt.Sscanf(reply, replyOK+" failing=%d nospace=%d other=%d", &st.FailingStreams, &st.NoSpaceErrors, &st.OtherErrors); err != nil {
		// A relay older than podunit (never restarted by it) knows no STATS.
		return Stats{}, fmt.Errorf("log relay: STATS: %q", reply)
	}
	return st, nil
}

// Ping checks that a relay answers at socket.
func Ping(socket string, timeout time.Duration) error {
	reply, err := call(socket, "PING", nil, timeout)
	if err != nil {
		return err
	}
	if reply != replyOK {
		return fmt.Errorf("log relay: %s", reply)
	}
	return nil
}

// call sends one request on a new SOCK_SEQPACKET connection (message
// boundaries and descriptors in one datagram) and reads the reply.
func call(socket, msg string, oob []byte, timeout time.Duration) (string, error) {
	uc, err := dial(socket, timeout)
	if err != nil {
		return "", err
	}
	defer uc.Close()
	if _, _, err := uc.WriteMsgUnix([]byte(msg), oob, nil); err != nil {
		return "", fmt.Errorf("log relay: send: %w", err)
	}
	buf := make([]byte, 512)
	n, err := uc.Read(buf)
	if err != nil {
		return "", fmt.Errorf("log relay: reply: %w", err)
	}
	return string(buf[:n]), nil
}

// dial opens a request connection whose deadline is timeout from now.
func dial(socket string, timeout time.Duration) (*net.UnixConn, error) {
	c, err := net.DialTimeout("unixpacket", socket, timeout)
	if err != nil {
		return nil, fmt.Errorf("log relay: %w", err)
	}
	uc := c.(*net.UnixConn)
	_ = uc.SetDeadline(time.Now().Add(timeout))
	return uc, nil
}

// closeAll closes raw descriptors received with a request that is refused.
func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// fileOf adopts a received descriptor as a non-blocking *os.File served
// by Go's poller.
func fileOf(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("non-blocking %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}
