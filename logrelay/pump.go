package logrelay

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/unitcgroup"
)

// Why not splice(2): journald reads a stream with SO_PASSCRED and takes
// the unit, and with it the unit's LogExtraFields= (CONTAINER_ID, ...),
// from the PID that wrote each chunk. Bytes the relay moves would carry the
// relay's own PID and land under podunit-logrelay.service. So the relay
// sends every chunk with SCM_CREDENTIALS naming a process of the
// container's unit (root may name any live PID): the container's own
// processes while they run, the unit's ExecStopPost helper while it waits
// for the drain.

// anchor finds a live process of the container's unit to send as.
type anchor struct {
	pid       int32
	cgroupDir string        // the unit's cgroup directory (walked for PIDs)
	waiter    *atomic.Int32 // the ExecStopPost helper waiting for the drain
}

// refresh picks another PID of the unit; false when it has none (between
// the container's exit and its ExecStopPost).
func (a *anchor) refresh() bool {
	dead := a.pid
	if a.waiter != nil {
		if w := a.waiter.Load(); w > 0 && w != dead {
			a.pid = w
			return true
		}
	}
	found := int32(0)
	unitcgroup.EachPID(a.cgroupDir, func(pid int) bool {
		if int32(pid) == dead {
			return true
		}
		found = int32(pid)
		return false
	})
	if found == 0 {
		return false
	}
	a.pid = found
	return true
}

// pump moves a container's output from its pipe to its journald stream
// until every writer of the pipe is gone (nil) or the stream fails,
// handing each chunk to the tap (attach sessions) once journald has it.
func pump(pipe, sock *os.File, a *anchor, t *Tap) error {
	src, err := sock.SyscallConn()
	if err != nil {
		return err
	}
	prc, err := pipe.SyscallConn()
	if err != nil {
		return err
	}
	for {
		// Wait without a buffer: an idle container costs the relay two
		// parked goroutines, not 128 KiB.
		if err := prc.Read(func(fd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			k, _ := unix.Poll(p, 0)
			return k > 0
		}); err != nil {
			return err
		}
		bp := bufPool.Get().(*[]byte)
		buf := *bp
		n, err := pipe.Read(buf)
		if n > 0 {
			if werr := sendAs(src, buf[:n], a); werr != nil {
				bufPool.Put(bp)
				return werr
			}
			if t != nil {
				t.Send(buf[:n])
			}
		}
		bufPool.Put(bp)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// sendAs writes b to the stream as a.pid. When that process is gone
// (ESRCH) it finds another one of the unit, waiting up to 5 s for one to
// appear; after that it sends as itself (the lines then lack the
// container's journal fields, which the warning in the relay's log says).
func sendAs(rc interface {
	Write(func(uintptr) bool) error
}, b []byte, a *anchor) error {
	var giveUp time.Time
	for len(b) > 0 {
		var oob []byte
		if a.pid > 0 {
			oob = unix.UnixCredentials(&unix.Ucred{Pid: a.pid, Uid: 0, Gid: 0})
		}
		var n int
		var serr error
		werr := rc.Write(func(fd uintptr) bool {
			for {
				n, serr = unix.SendmsgN(int(fd), b, oob, nil, unix.MSG_NOSIGNAL)
				if errors.Is(serr, unix.EINTR) {
					continue
				}
				return !errors.Is(serr, unix.EAGAIN)
			}
		})
		if werr != nil {
			return werr
		}
		switch {
		case serr == nil:
			b = b[n:]
		case errors.Is(serr, unix.ESRCH) && a.pid > 0:
			if a.refresh() {
				continue
			}
			if giveUp.IsZero() {
				giveUp = time.Now().Add(5 * time.Second)
			}
			if time.Now().After(giveUp) {
				a.pid = 0
				continue
			}
			time.Sleep(5 * time.Millisecond)
		default:
			return serr
		}
	}
	return nil
}
