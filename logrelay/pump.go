package logrelay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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

// pump moves a container's output from its pipe until every writer of
// the pipe is gone (nil): each chunk goes to the CRI log file first (cri,
// when the container has one), then to journald (j, best effort, never
// waited for) and to the tap (attach sessions). Nothing more is read
// before the chunk is in the file, so a killed relay leaves the rest in
// the pipe.
//
// A terminal's master (tty true) cannot be spliced (splice needs a pipe on
// one side): its chunks are read, then copied into the spool, so a relay
// killed between the two loses that one chunk from the CRI file. A master
// reads EIO once no process holds the slave any more: its end of file.
func pump(pipe *os.File, tty bool, cri *criStream, j *journalSink, t *Tap, onWriteErr func(error)) error {
	prc, err := pipe.SyscallConn()
	if err != nil {
		return err
	}
	if cri != nil && cri.sp != nil {
		// What a killed relay took from the pipe but had not written.
		if b, err := cri.sp.unprocessed(); err != nil {
			onWriteErr(err)
		} else if len(b) > 0 {
			if err := cri.take(b, false, time.Now()); err != nil {
				onWriteErr(err)
			}
		}
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
		var n int
		switch {
		case cri != nil && cri.sp != nil && tty:
			n, err = cri.sp.read(pipe, buf)
		case cri != nil && cri.sp != nil:
			n, err = cri.sp.take(prc, buf)
		default:
			n, err = pipe.Read(buf)
		}
		if tty && errors.Is(err, unix.EIO) {
			err = io.EOF
		}
		eof := errors.Is(err, io.EOF)
		if cri != nil && (n > 0 || eof) {
			if werr := cri.take(buf[:n], eof, time.Now()); werr != nil {
				onWriteErr(werr)
			} else {
				onWriteErr(nil)
			}
		}
		if n > 0 {
			if j != nil {
				j.push(buf[:n])
			}
			if t != nil {
				t.Send(buf[:n])
			}
		}
		bufPool.Put(bp)
		if eof {
			return nil
		}
		if err != nil {
			return err
		}
		if cri != nil {
			if rerr := cri.rotate(); rerr != nil {
				onWriteErr(rerr)
			}
		}
	}
}

// take moves what the pipe holds (at most len(buf)) into the spool and
// returns it in buf: splice(2) takes the bytes from the pipe and puts
// them in the spool in one step, so a kill cannot lose them in between.
// io.EOF once no writer is left and the pipe is empty.
func (sp *spool) take(prc syscall.RawConn, buf []byte) (int, error) {
	var n int64
	var serr error
	off := sp.end
	err := prc.Read(func(fd uintptr) bool {
		for {
			n, serr = unix.Splice(int(fd), nil, int(sp.f.Fd()), &off, len(buf), unix.SPLICE_F_NONBLOCK)
			if errors.Is(serr, unix.EINTR) {
				continue
			}
			return !errors.Is(serr, unix.EAGAIN)
		}
	})
	if err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("splice into the log spool: %w", serr)
	}
	if n == 0 {
		return 0, io.EOF
	}
	k, err := sp.f.ReadAt(buf[:n], sp.end)
	sp.end += int64(k)
	if err != nil {
		return k, fmt.Errorf("read the log spool: %w", err)
	}
	return k, nil
}

// read is take for a descriptor splice(2) does not serve (a terminal's
// master): a read, then a copy into the spool. A copy that fails (the
// state dir full) still counts as spooled: the chunk is in buf and is
// written now; only a kill before it is written would replay a hole.
func (sp *spool) read(f *os.File, buf []byte) (int, error) {
	n, err := f.Read(buf)
	if n > 0 {
		_, _ = sp.f.WriteAt(buf[:n], sp.end)
		sp.end += int64(n)
	}
	return n, err
}

// journalSink hands a stream's bytes to its journald stream from its own
// goroutine through a bounded queue: a slow, restarting or dead journald
// costs journal lines (dropped when the queue is full, counted and
// logged), never a delay of the CRI file or of the container.
//
// The queue is a slice that exists only while bytes wait, not a buffered
// channel: a channel of 4096 slots cost every stream 96 KiB from its
// start, the relay's whole growth per idle container (the density
// benchmark's 225 KiB per container, two streams).
type journalSink struct {
	mu      sync.Mutex
	q       [][]byte // chunks waiting, oldest first
	queued  int64    // bytes in q
	closed  bool
	wake    chan struct{} // capacity 1: the goroutine has something to do
	limit   int64
	dropped atomic.Int64
	done    chan struct{}
	err     error // set when the goroutine gives up on the stream
}

// journalQueueBytes bounds what waits for journald per stream.
const journalQueueBytes = 4 << 20

// journalChunkBytes is how far push coalesces small chunks into the last
// waiting one: it bounds the queue's entries (two neighbours always hold
// more than this) and the sends a burst of short lines costs.
const journalChunkBytes = 64 << 10

func newJournalSink(sock *os.File, a *anchor) *journalSink {
	j := &journalSink{wake: make(chan struct{}, 1), limit: journalQueueBytes, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		rc, err := sock.SyscallConn()
		if err != nil {
			j.err = err
		}
		for {
			j.mu.Lock()
			batch, closed := j.q, j.closed
			j.q = nil
			j.mu.Unlock()
			if len(batch) == 0 {
				if closed {
					return
				}
				<-j.wake
				continue
			}
			for _, b := range batch {
				if j.err == nil {
					j.err = sendAs(rc, b, a)
				}
				j.mu.Lock()
				j.queued -= int64(len(b))
				j.mu.Unlock()
			}
		}
	}()
	return j
}

// push queues a copy of b, or drops it when the queue is full.
func (j *journalSink) push(b []byte) {
	j.mu.Lock()
	if j.queued+int64(len(b)) > j.limit {
		j.mu.Unlock()
		j.dropped.Add(int64(len(b)))
		return
	}
	if n := len(j.q); n > 0 && len(j.q[n-1])+len(b) <= journalChunkBytes {
		j.q[n-1] = append(j.q[n-1], b...)
	} else {
		j.q = append(j.q, append(make([]byte, 0, max(len(b), 4<<10)), b...))
	}
	j.queued += int64(len(b))
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// close lets the queue drain, at most d: the unit's ExecStopPost helper
// waits for the relay, and it is the process the last lines are sent as.
func (j *journalSink) close(d time.Duration) bool {
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-j.done:
		return true
	case <-t.C:
		return false
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
