package streaming

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/errdefs"
)

type fakeContainers struct {
	mu sync.Mutex
	m  map[string]Target
}

func (f *fakeContainers) StreamTarget(_ context.Context, id string) (Target, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.m[id]
	if !ok {
		return Target{}, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return t, nil
}

func (f *fakeContainers) set(t Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]Target{}
	}
	f.m[t.ID] = t
}

type fakePods map[string]string

func (f fakePods) NetNSPath(_ context.Context, id string) (string, error) {
	p, ok := f[id]
	if !ok {
		return "", fmt.Errorf("pod %s: %w", id, errdefs.ErrNotFound)
	}
	return p, nil
}

func startServer(t *testing.T, d Deps) *Server {
	t.Helper()
	if d.Exec == nil {
		d.Exec = &fakeExec{}
	}
	s, err := New(Config{Address: config.Default().Streaming.Address}, d)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	return s
}

// spdyConnect upgrades a streaming URL the way kubectl and critest do.
func spdyConnect(t *testing.T, rawURL, protocol string) httpstream.Connection {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := spdy.NewRoundTripper(nil)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(httpstream.HeaderProtocolVersion, protocol)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := rt.NewConnection(resp)
	if err != nil {
		t.Fatalf("upgrade %s: %v (status %d)", rawURL, err, resp.StatusCode)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rcStreams are the client ends of one exec or attach session.
type rcStreams struct {
	errs, stdin, stdout, stderr, resize httpstream.Stream
}

// remoteCommand opens the streams of the v4 remotecommand protocol the
// way client-go does: error first, then the requested ones.
func remoteCommand(t *testing.T, rawURL string, stdin, stdout, stderr, tty bool) rcStreams {
	t.Helper()
	conn := spdyConnect(t, rawURL, "v4.channel.k8s.io")
	var s rcStreams
	mk := func(kind string) httpstream.Stream {
		h := http.Header{}
		h.Set("streamType", kind)
		st, err := conn.CreateStream(h)
		if err != nil {
			t.Fatalf("create %s stream: %v", kind, err)
		}
		return st
	}
	s.errs = mk("error")
	if stdin {
		s.stdin = mk("stdin")
	}
	if stdout {
		s.stdout = mk("stdout")
	}
	if stderr {
		s.stderr = mk("stderr")
	}
	if tty {
		s.resize = mk("resize")
	}
	return s
}

// readUntil reads r until what it has read contains want.
func readUntil(t *testing.T, r io.Reader, want string, timeout time.Duration) string {
	t.Helper()
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 4096)
		for !strings.Contains(buf.String(), want) {
			n, err := r.Read(b)
			buf.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("timed out waiting for %q", want)
	}
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("got %q, want it to contain %q", buf.String(), want)
	}
	return buf.String()
}

// status reads the session's final status from the error stream.
func (s rcStreams) status(t *testing.T, timeout time.Duration) string {
	t.Helper()
	c := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(s.errs); c <- b }()
	select {
	case b := <-c:
		return string(b)
	case <-time.After(timeout):
		t.Fatal("session did not end")
	}
	return ""
}

// memStore is systemd's fd store in memory: it keeps duplicates, as
// systemd does, so the caller's copies can be closed.
type memStore struct {
	mu  sync.Mutex
	fds map[string]*os.File
	log []string
}

func (m *memStore) Store(name string, f *os.File) error {
	var nfd int
	err := console.Control(f, func(fd int) error {
		var err error
		nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		return err
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fds == nil {
		m.fds = map[string]*os.File{}
	}
	m.fds[name] = os.NewFile(uintptr(nfd), name)
	m.log = append(m.log, "store "+name)
	return nil
}

func (m *memStore) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.fds[name]; f != nil {
		f.Close()
		delete(m.fds, name)
	}
	m.log = append(m.log, "remove "+name)
	return nil
}

// restart hands the stored files back like LISTEN_FDS after a restart.
func (m *memStore) restart() []*os.File {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*os.File
	for name, f := range m.fds {
		var nfd int
		console.Control(f, func(fd int) error {
			var err error
			nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
			return err
		})
		out = append(out, os.NewFile(uintptr(nfd), name))
	}
	return out
}

func (m *memStore) entries() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.log...)
}
