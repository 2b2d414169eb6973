//go:build integration

package container

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/streaming"
)

// ttyPods answers the streaming server's pod lookups (attach needs none).
type ttyPods struct{}

func (ttyPods) NetNSPath(context.Context, string) (string, error) { return "", nil }

// screen is what an attach session's client has seen.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// waitFor waits until the output after mark contains want; it returns the
// new mark (the end of want).
func (s *screen) waitFor(t *testing.T, mark int, want string, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		all := s.buf.String()
		s.mu.Unlock()
		if i := strings.Index(all[mark:], want); i >= 0 {
			return mark + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q on the terminal within %v; after the mark it shows %q", want, d, all[mark:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sizes is the client's terminal size queue.
type sizes chan remotecommand.TerminalSize

func (q sizes) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// ttySession is one `crictl attach -it` against the container.
type ttySession struct {
	in    *io.PipeWriter
	out   *screen
	sizes sizes
	done  chan error
}

func attachTTY(ctx context.Context, t *testing.T, srv *streaming.Server, id string) *ttySession {
	t.Helper()
	resp, err := srv.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Tty: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", mustURL(t, resp.Url))
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	s := &ttySession{in: pw, out: &screen{}, sizes: make(sizes, 4), done: make(chan error, 1)}
	go func() {
		s.done <- e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: s.out, Tty: true, TerminalSizeQueue: s.sizes})
	}()
	// The relay's tap takes the session in asynchronously.
	time.Sleep(300 * time.Millisecond)
	return s
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (s *ttySession) send(t *testing.T, text string) {
	t.Helper()
	if _, err := s.in.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
}

// end closes the client's stdin and waits for the session to end.
func (s *ttySession) end(t *testing.T) {
	t.Helper()
	s.in.Close()
	close(s.sizes)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("attach session did not end with its stdin")
	}
}

// A tty container runs on a real terminal whose master the log relay
// holds: attach gets echo and line editing, resizes reach the terminal,
// ^C is SIGINT to the foreground job, the CRI log has the output as
// stdout, the terminal survives a relay restart, and stdin_once hangs it
// up when the session that had stdin ends.
func (ie *inside) ttyContainer(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	srv, err := streaming.New(streaming.Config{Address: "127.0.0.1:0"}, streaming.Deps{
		Containers: m, Exec: m, Pods: ttyPods{}, Terminals: logrelay.Client{Socket: ie.opts.LogRelaySocket},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close()

	for _, name := range []string{"ttysh", "crun-tty"} {
		t.Run(name, func(t *testing.T) {
			cfg := shConfig(name, "")
			cfg.Command, cfg.Tty, cfg.Stdin = []string{"/bin/sh"}, true, true
			id := ie.run(ctx, t, m, cfg)
			// A failure here must not leave the container to the next
			// subtests' leak checks.
			t.Cleanup(func() { _ = m.Remove(context.WithoutCancel(ctx), id) })
			s := attachTTY(ctx, t, srv, id)
			s.sizes <- remotecommand.TerminalSize{Width: 120, Height: 40}
			s.send(t, "echo h\"\"i\n")
			// The terminal echoes the input, then the command's output. Only
			// the output's line is certain: input that arrives before the
			// shell has its line editor up is echoed by the line discipline
			// and then redrawn by the shell, anywhere in the line
			// ("echo h\"\"\r~ # echo h\"\"\x1b[Ji\r\nhi\r\n"). The quotes keep
			// the echo from ever reading "hi".
			mark := s.out.waitFor(t, 0, "\nhi\r\n", 10*time.Second)
			// Line editing: the line discipline erases before the shell reads.
			s.send(t, "echo abX\x7fc\n")
			mark = s.out.waitFor(t, mark, "abc\r\n", 5*time.Second)
			s.sizes <- remotecommand.TerminalSize{Width: 91, Height: 37}
			time.Sleep(200 * time.Millisecond)
			s.send(t, "stty size\n")
			mark = s.out.waitFor(t, mark, "37 91\r\n", 5*time.Second)
			// ^C interrupts the foreground job, not the shell.
			s.send(t, "sleep 100\n")
			time.Sleep(700 * time.Millisecond)
			start := time.Now()
			s.send(t, "\x03")
			s.send(t, "echo back-$?\n")
			s.out.waitFor(t, mark, "back-130\r\n", 5*time.Second)
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("^C took %v", d)
			}
			if name == "ttysh" {
				// The terminal outlives a relay restart: attach again.
				s.end(t)
				ie.killRelay(ctx, t)
				s = attachTTY(ctx, t, srv, id)
				s.send(t, "echo after-re\"\"start\n")
				s.out.waitFor(t, 0, "after-restart\r\n", 10*time.Second)
			}
			s.send(t, "exit 3\n")
			ie.waitExited(ctx, t, m, id, 30*time.Second)
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				t.Fatal("attach session did not end with the container")
			}
			if st, _, _ := m.Status(ctx, id, false); st.GetExitCode() != 3 {
				t.Errorf("exit code %d, want 3", st.GetExitCode())
			}
			b, err := os.ReadFile(filepath.Join(ie.logDir, name+".log"))
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
				f := strings.SplitN(l, " ", 4)
				if len(f) != 4 || f[1] != "stdout" {
					t.Fatalf("CRI log line %q: a terminal's output is stdout", l)
				}
				lines = append(lines, f[2]+" "+f[3])
			}
			for _, want := range []string{"F hi", "F abc", "F 37 91", "F back-130"} {
				found := false
				for _, l := range lines {
					found = found || l == want
				}
				if !found {
					t.Errorf("CRI log has no %q: %q", want, lines)
				}
			}
			if err := m.Remove(ctx, id); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("StdinOnce", func(t *testing.T) {
		cfg := shConfig("ttyonce", "")
		cfg.Command, cfg.Tty, cfg.Stdin, cfg.StdinOnce = []string{"/bin/sh"}, true, true, true
		id := ie.run(ctx, t, m, cfg)
		s := attachTTY(ctx, t, srv, id)
		s.send(t, "echo on\"\"ce\n")
		s.out.waitFor(t, 0, "once\r\n", 10*time.Second)
		// The session that had stdin ends: the terminal hangs up and
		// the shell goes with it.
		s.end(t)
		ie.waitExited(ctx, t, m, id, 15*time.Second)
		if _, err := srv.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Tty: true}); err == nil {
			t.Error("attach to the exited container accepted")
		}
		if err := m.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	})
	ie.assertNoLeaks(ctx, t)
}
