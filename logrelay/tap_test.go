package logrelay

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Taps deliver partial lines at once (attach shows a prompt
// without a newline) and drop a session that stopped reading instead of
// blocking the container.
func TestTapDeliversPartialLinesAndDropsSlowReaders(t *testing.T) {
	dir := t.TempDir()
	tp := NewTap(filepath.Join(dir, "tap-out.sock"))
	defer tp.Close()
	c, err := net.Dial("unix", filepath.Join(dir, "tap-out.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	slow, err := net.Dial("unix", filepath.Join(dir, "tap-out.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		tp.mu.Lock()
		n := len(tp.conns)
		tp.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions accepted, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A pipe relayed with the tap: the journal side gets everything too.
	var in, out [2]int
	if err := unix.Pipe(in[:]); err != nil {
		t.Fatal(err)
	}
	// The relay's descriptors are non-blocking (served by the poller).
	if err := unix.SetNonblock(in[0], true); err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	out = [2]int{sp[1], sp[0]}
	if err := unix.SetNonblock(out[1], true); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		j := newJournalSink(os.NewFile(uintptr(out[1]), "out"), &anchor{})
		_ = pump(os.NewFile(uintptr(in[0]), "in"), false, nil, j, tp, func(error) {})
		j.close(time.Second)
		close(done)
	}()
	if _, err := unix.Write(in[1], []byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 5)
	if _, err := bufio.NewReader(c).Read(buf); err != nil || string(buf) != "hello" {
		t.Fatalf("tap read %q, %v", buf, err)
	}
	j := make([]byte, 5)
	if n, err := unix.Read(out[0], j); err != nil || string(j[:n]) != "hello" {
		t.Fatalf("journal side read %q, %v", j[:n], err)
	}
	// The slow session never reads: more than a socket buffer's worth
	// must not stall the relay.
	big := make([]byte, 64<<10)
	go func() {
		for i := 0; i < 64; i++ {
			_, _ = unix.Write(in[1], big)
		}
		unix.Close(in[1])
	}()
	go func() { // drain the journal side and the fast session
		b := make([]byte, 1<<20)
		for {
			if n, _ := unix.Read(out[0], b); n <= 0 {
				return
			}
		}
	}()
	go func() {
		b := make([]byte, 1<<20)
		for {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(b); err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("relay blocked by a session that does not read")
	}
}
