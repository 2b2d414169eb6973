package streaming

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	clientexec "k8s.io/client-go/util/exec"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/config"
)

// These tests use client-go's own websocket clients, as critest
// -websocket-exec/-attach/-portforward and kubectl do: v5.channel.k8s.io
// for exec and attach, SPDY tunnelled in a websocket for port-forward.

func wsConfig() *rest.Config {
	return &rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// wsStream runs one session with client-go's websocket executor.
func wsStream(t *testing.T, rawURL string, opts remotecommand.StreamOptions) error {
	t.Helper()
	e, err := remotecommand.NewWebSocketExecutor(wsConfig(), "GET", rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.StreamWithContext(ctx, opts)
}

// ttyExec reports the terminal sizes it is given, then echoes stdin.
type ttyExec struct{}

func (ttyExec) Exec(ctx context.Context, id string, p ExecProcess) (int, error) {
	if !p.TTY || p.Resize == nil {
		return 1, fmt.Errorf("tty %v resize %v", p.TTY, p.Resize != nil)
	}
	select {
	case ws := <-p.Resize:
		fmt.Fprintf(p.Stdout, "size %dx%d\r\n", ws.Width, ws.Height)
	case <-time.After(10 * time.Second):
		return 1, errors.New("no terminal size")
	}
	io.Copy(p.Stdout, p.Stdin)
	return 0, nil
}

type oneSize struct{ sent bool }

func (q *oneSize) Next() *remotecommand.TerminalSize {
	if q.sent {
		return nil
	}
	q.sent = true
	return &remotecommand.TerminalSize{Width: 100, Height: 40}
}

func TestWebSocketExec(t *testing.T) {
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: "c1", Running: true})
	s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Exec: &fakeExec{}})
	ctx := context.Background()

	t.Run("stdin ends", func(t *testing.T) {
		// fakeExec reads stdin to EOF: the session only ends if the
		// client's v5 CLOSE of stdin reaches the command.
		resp, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"cat"}, Stdin: true, Stdout: true, Stderr: true})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		err = wsStream(t, resp.Url, remotecommand.StreamOptions{Stdin: strings.NewReader("data"), Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatalf("stream: %v (stdout %q)", err, out.String())
		}
		if want := "ran cat in c1\nstdin \"data\"\n"; out.String() != want || errb.Len() != 0 {
			t.Fatalf("stdout %q stderr %q, want %q", out.String(), errb.String(), want)
		}
		// The URL is single-use, over websockets as over SPDY.
		err = wsStream(t, resp.Url, remotecommand.StreamOptions{Stdin: strings.NewReader("x"), Stdout: io.Discard})
		if err == nil {
			t.Fatal("a used URL streamed again")
		}
	})
	t.Run("library refusal", func(t *testing.T) {
		// A path the front expects but the library does not know (as when
		// the token expires between the two checks): the websocket is
		// already up, so the refusal arrives as the session's status.
		u := s.URL() + "/exec/not-issued"
		if err := s.front.pending.add(u, streamOpts{Stdout: true}); err != nil {
			t.Fatal(err)
		}
		err := wsStream(t, u, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("err %v, want the library's 404 as the status", err)
		}
	})
	t.Run("exit code", func(t *testing.T) {
		resp, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"exit", "7"}, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = wsStream(t, resp.Url, remotecommand.StreamOptions{Stdout: &out})
		var exit clientexec.CodeExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
			t.Fatalf("err %v (%T), want exit code 7", err, err)
		}
		if out.String() != "ran exit 7 in c1\n" {
			t.Fatalf("stdout %q", out.String())
		}
	})
	t.Run("tty and resize", func(t *testing.T) {
		s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Exec: ttyExec{}})
		resp, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh"}, Tty: true, Stdin: true, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = wsStream(t, resp.Url, remotecommand.StreamOptions{
			Stdin: strings.NewReader("typed"), Stdout: &out, Tty: true, TerminalSizeQueue: &oneSize{},
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := "size 100x40\r\ntyped"; out.String() != want {
			t.Fatalf("stdout %q, want %q", out.String(), want)
		}
	})
	t.Run("unknown token", func(t *testing.T) {
		u, _ := url.Parse(s.URL())
		u.Path = "/exec/nosuchtoken"
		if err := wsStream(t, u.String(), remotecommand.StreamOptions{Stdout: io.Discard}); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("unknown token: %v, want a 404", err)
		}
	})
	t.Run("SPDY unchanged", func(t *testing.T) {
		resp, err := s.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"exit", "3"}, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(resp.Url)
		e, err := remotecommand.NewSPDYExecutor(wsConfig(), "POST", u)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out})
		var exit clientexec.CodeExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != 3 || out.String() != "ran exit 3 in c1\n" {
			t.Fatalf("err %v stdout %q", err, out.String())
		}
	})
}

// TestWebSocketAttach attaches over v5 to a "container" played by the
// test: it reads the stdin FIFO and answers on the output pipe.
func TestWebSocketAttach(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "stdin")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	defer outW.Close()
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			fmt.Fprintf(outW, "got %s\n", sc.Text())
		}
	}()
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: "a1", Running: true, Stdin: true, StdinPath: fifo})
	s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Output: &pipeOutput{r: outR}})
	resp, err := s.Attach(context.Background(), &runtimeapi.AttachRequest{ContainerId: "a1", Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	// Input is held back until the output is followed, so the answer
	// cannot come before the session listens for it.
	stdinR, stdinW := io.Pipe()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- wsStream(t, resp.Url, remotecommand.StreamOptions{Stdin: stdinR, Stdout: out, Stderr: io.Discard})
	}()
	go func() {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(stdinW, "hello\n")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "got hello\n") {
		select {
		case err := <-done:
			t.Fatalf("session ended early: %v (stdout %q)", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("stdout %q, want the container's answer", out.String())
		}
	}
	// Without stdin_once the session ends with the client's stdin.
	stdinW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("session did not end with the client's stdin")
	}
}

// TestWebSocketPortForward forwards through client-go's SPDY-over-websocket
// dialer into a pod network namespace (root), as critest does.
func TestWebSocketPortForward(t *testing.T) {
	ns := podNetNS(t)
	port := podServer(t, ns)
	s := startServer(t, Deps{Containers: &fakeContainers{}, Pods: fakePods{"pod1": ns}})
	resp, err := s.PortForward(context.Background(), &runtimeapi.PortForwardRequest{PodSandboxId: "pod1", Port: []int32{port}})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		t.Fatal(err)
	}
	dialer, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, wsConfig())
	if err != nil {
		t.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	var pfOut, pfErr syncBuffer
	pf, err := portforward.NewForStreaming(dialer, []string{fmt.Sprintf("0:%d", port), fmt.Sprintf("0:%d", port+1)}, stop, ready, &pfOut, &pfErr)
	if err != nil {
		t.Fatal(err)
	}
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- pf.ForwardPorts() }()
	defer close(stop)
	select {
	case <-ready:
	case err := <-fwdDone:
		t.Fatalf("forward: %v (stderr %q)", err, pfErr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("forward not ready (stderr %q)", pfErr.String())
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 2 {
		t.Fatalf("ports %v %v", ports, err)
	}
	local := fmt.Sprintf("127.0.0.1:%d", ports[0].Local)

	t.Run("download", func(t *testing.T) {
		c, err := net.Dial("tcp", local)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte{'D'})
		got, n := digest(c)
		want, _ := digest(io.LimitReader(newPRNG(), moveSize))
		if n != moveSize || got != want {
			t.Fatalf("got %d bytes sha %s, want %d bytes sha %s", n, got, moveSize, want)
		}
	})
	t.Run("upload", func(t *testing.T) {
		c, err := net.Dial("tcp", local)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			c.Write([]byte{'U'})
			io.Copy(c, io.LimitReader(newPRNG(), moveSize))
			c.(*net.TCPConn).CloseWrite() // the pod still answers
		}()
		got, _ := io.ReadAll(c)
		want, _ := digest(io.LimitReader(newPRNG(), moveSize))
		if string(got) != want {
			t.Fatalf("pod saw sha %q, want %q", got, want)
		}
	})
	t.Run("closed port", func(t *testing.T) {
		// The pod's refusal comes back on the pair's error stream; client-go
		// 1.37 then drops the local connection and ends the whole forward.
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[1].Local))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read %d %v, want the connection closed", n, err)
		}
		// Whether client-go then ends the whole forward depends on which it
		// sees first, the error stream's message or the data stream's
		// reset (seen under load): only an end for another reason fails.
		select {
		case err := <-fwdDone:
			if !errors.Is(err, portforward.ErrLostConnectionToPod) {
				t.Fatalf("forward ended with %v, want it ended by the error stream", err)
			}
		case <-time.After(10 * time.Second):
			t.Log("the forward outlived the refused connection (the client saw the stream reset first)")
		}
	})

	// The URL is single-use: a second tunnel is refused before any
	// websocket is set up.
	d2, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, wsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d2.Dial("portforward.k8s.io"); err == nil {
		t.Fatal("a used port-forward URL was tunnelled again")
	}
}

func TestPendingStreams(t *testing.T) {
	p := &pendingStreams{m: map[string]pendingStream{}}
	if err := p.add("http://127.0.0.1:1/exec/tok", streamOpts{Stdin: true, Stdout: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.take("/exec/other"); ok {
		t.Fatal("unknown path taken")
	}
	o, ok := p.take("/exec/tok")
	if !ok || !o.Stdin || !o.Stdout || o.Stderr || o.TTY {
		t.Fatalf("take: %+v %v", o, ok)
	}
	if _, ok := p.take("/exec/tok"); ok {
		t.Fatal("taken twice")
	}
	p.add("http://127.0.0.1:1/attach/old", streamOpts{Stdout: true})
	p.m["/attach/old"] = pendingStream{expires: time.Now().Add(-time.Second)}
	if _, ok := p.take("/attach/old"); ok {
		t.Fatal("expired entry taken")
	}
	p.m["/attach/stale"] = pendingStream{expires: time.Now().Add(-time.Second)}
	p.add("http://127.0.0.1:1/attach/new", streamOpts{Stdout: true})
	if _, ok := p.m["/attach/stale"]; ok {
		t.Fatal("expired entries are not pruned")
	}
}

// TestWebSocketTLS: clients come with TLS, the in-process hop stays plain.
func TestWebSocketTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	ctrs := &fakeContainers{}
	ctrs.set(Target{ID: "c1", Running: true})
	s, err := New(Config{Address: config.Default().Streaming.Address, TLSCert: certFile, TLSKey: keyFile}, Deps{Containers: ctrs, Pods: fakePods{}, Exec: &fakeExec{}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	resp, err := s.Exec(context.Background(), &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"exit", "5"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Url, "https://") {
		t.Fatalf("url %q", resp.Url)
	}
	var out bytes.Buffer
	err = wsStream(t, resp.Url, remotecommand.StreamOptions{Stdout: &out})
	var exit clientexec.CodeExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 5 || out.String() != "ran exit 5 in c1\n" {
		t.Fatalf("err %v stdout %q", err, out.String())
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "podunit-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// A refusal carries the API's reason for its code and the library's words.
func TestRefusalStatus(t *testing.T) {
	for _, tc := range []struct {
		code   int
		body   string
		reason metav1.StatusReason
		msg    string
	}{
		{http.StatusNotFound, "token not found\n", metav1.StatusReasonNotFound, "token not found"},
		{http.StatusBadRequest, "", metav1.StatusReasonBadRequest, "Bad Request"},
		{http.StatusInternalServerError, "boom", metav1.StatusReasonInternalError, "boom"},
	} {
		st := refusal(&http.Response{StatusCode: tc.code, Body: io.NopCloser(strings.NewReader(tc.body))})
		if st.Status != metav1.StatusFailure || st.Code != int32(tc.code) || st.Reason != tc.reason || st.Message != tc.msg {
			t.Errorf("refusal(%d, %q) = %+v, want reason %s, message %q", tc.code, tc.body, st, tc.reason, tc.msg)
		}
	}
}
