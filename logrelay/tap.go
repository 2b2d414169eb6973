package logrelay

import (
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The attach taps of an attachable container, in its run directory: the
// relay listens on them, attach (package streaming) and the fallback relay
// of package stdio use the same names.
const (
	TapOut = "tap-out.sock"
	TapErr = "tap-err.sock"
)

// Tap hands copies of a stream to attach sessions that connect to a unix
// socket. A session that does not keep up loses its connection; the
// container never waits for it.
type Tap struct {
	mu    sync.Mutex
	l     *net.UnixListener
	conns map[*net.UnixConn]bool
}

// NewTap listens at path (mode 0600). Without a listener the tap is a
// no-op: the journal still has every complete line.
func NewTap(path string) *Tap {
	t := &Tap{conns: map[*net.UnixConn]bool{}}
	_ = os.Remove(path)
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return t
	}
	t.l = l
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			t.mu.Lock()
			t.conns[c] = true
			t.mu.Unlock()
		}
	}()
	return t
}

// Send copies b to every connected session.
func (t *Tap) Send(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.conns {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Write(b); err != nil {
			c.Close()
			delete(t.conns, c)
		}
	}
}

// Close ends every session and removes the socket.
func (t *Tap) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.l != nil {
		t.l.Close()
	}
	for c := range t.conns {
		c.Close()
	}
}
