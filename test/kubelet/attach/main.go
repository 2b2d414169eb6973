// Command kubelet-attach is the kubelet end of `kubectl attach -it`: it
// opens the kubelet's /attach endpoint the way the API server does for
// kubectl (SPDY, stdin + stdout + tty, a terminal size queue) and plays a
// script against the container's terminal. The kubelet e2e's attach
// scenario uses it: a standalone kubelet has no API server to run kubectl
// against.
//
// Usage: kubelet-attach [-timeout 20s] URL STEP...
//
//	send=TEXT     type TEXT (Go escapes: \r, \x03 …)
//	expect=TEXT   wait until TEXT appears in the output after the last match
//	resize=WxH    resize the terminal (columns x rows)
//	sleep=DUR     pause (a command typed must have started before a ^C)
//
// It exits 0 when every step is done, 1 on the first unmet step, printing
// what the terminal showed. It then leaves the way kubectl does when it is
// ended: stdin closed and the connection dropped; the container goes on.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

func main() {
	timeout := flag.Duration("timeout", 20*time.Second, "how long each expect step may wait")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: kubelet-attach [-timeout D] URL STEP...")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Args()[1:], *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-attach:", err)
		os.Exit(1)
	}
}

// screen collects the terminal's output and lets a step wait for text.
type screen struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	grown chan struct{}
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	close(s.grown)
	s.grown = make(chan struct{})
	return len(p), nil
}

// waitFor returns the offset after want's first occurrence at or after from.
func (s *screen) waitFor(from int, want string, d time.Duration, ended <-chan error) (int, error) {
	deadline := time.After(d)
	for {
		s.mu.Lock()
		if i := bytes.Index(s.buf.Bytes()[from:], []byte(want)); i >= 0 {
			s.mu.Unlock()
			return from + i + len(want), nil
		}
		grown := s.grown
		s.mu.Unlock()
		select {
		case <-grown:
		case err := <-ended:
			return 0, fmt.Errorf("session ended (%v) before %q appeared", err, want)
		case <-deadline:
			return 0, fmt.Errorf("%q did not appear within %s", want, d)
		}
	}
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

type sizes chan remotecommand.TerminalSize

func (q sizes) Next() *remotecommand.TerminalSize {
	sz, ok := <-q
	if !ok {
		return nil
	}
	return &sz
}

func run(rawURL string, steps []string, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	// The test kubelet serves a self-signed certificate and allows anonymous
	// requests (test/kubelet/kubelet-config.yaml).
	cfg := &rest.Config{Host: u.Scheme + "://" + u.Host, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	exe, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return fmt.Errorf("spdy executor: %w", err)
	}

	scr := &screen{grown: make(chan struct{})}
	q := make(sizes, 4)
	q <- remotecommand.TerminalSize{Width: 80, Height: 24}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		ended <- exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: scr, Tty: true, TerminalSizeQueue: q})
	}()

	mark := 0
	for _, st := range steps {
		verb, arg, ok := strings.Cut(st, "=")
		if !ok {
			return fmt.Errorf("step %q: want VERB=ARG", st)
		}
		text, err := strconv.Unquote(`"` + strings.ReplaceAll(arg, `"`, `\"`) + `"`)
		if err != nil {
			return fmt.Errorf("step %q: %w", st, err)
		}
		switch verb {
		case "send":
			if _, err := io.WriteString(pw, text); err != nil {
				return fmt.Errorf("send %q: %w", arg, err)
			}
		case "expect":
			if mark, err = scr.waitFor(mark, text, timeout, ended); err != nil {
				return fmt.Errorf("%w; the terminal showed:\n%s", err, scr.String())
			}
			fmt.Printf("ok %s\n", arg)
		case "resize":
			var w, h uint16
			if _, err := fmt.Sscanf(text, "%dx%d", &w, &h); err != nil {
				return fmt.Errorf("resize %q: %w", arg, err)
			}
			q <- remotecommand.TerminalSize{Width: w, Height: h}
		case "sleep":
			d, err := time.ParseDuration(text)
			if err != nil {
				return fmt.Errorf("sleep %q: %w", arg, err)
			}
			time.Sleep(d)
		default:
			return fmt.Errorf("step %q: unknown verb %q", st, verb)
		}
	}
	// Detach like an ended kubectl: stdin closed, the connection dropped.
	pw.Close()
	cancel()
	select {
	case <-ended:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the session did not end within %s of dropping the connection", timeout)
	}
}
