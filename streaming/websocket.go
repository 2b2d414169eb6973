package streaming

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/websocket"
	"golang.org/x/sys/unix"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// client-go 1.37 (kubectl, crictl, critest) opens exec and attach with the
// websocket subprotocol v5.channel.k8s.io and port-forward with SPDY
// tunnelled through a websocket (SPDY/3.1+portforward.k8s.io).
// cri-streaming v0.37 negotiates only the older websocket protocols, and
// golang.org/x/net/websocket refuses the rest with 403. The kubelet (with
// ExtendWebSocketsToKubelet) and the API server meet the same client in
// front of a CRI streaming server: they translate v5 to SPDY and unwrap
// the tunnel, then speak SPDY to the runtime. podunit does the same, with
// the SPDY side going to its own library handler over an in-process
// connection: one SPDY implementation, one token check, one runtime.
//
// The translation is podunit's own rather than k8s.io/apiserver's
// (StreamTranslatorHandler, TunnelingHandler): those bring client-go's
// typed clients, k8s.io/api and the API server's metrics into the daemon,
// about 260 packages that every build compiled and every start (and every
// layer's re-exec of the binary during a pull) initialised, for two relays
// of a few hundred lines.

// innerHost names the in-process SPDY hop in URLs; it is never resolved.
const innerHost = "podunit-streaming.internal"

// The wire names both sides use (k8s.io/api/core/v1 and apimachinery's
// remotecommand and portforward constants, which podunit does not import).
const (
	v5Protocol = "v5.channel.k8s.io"
	v4Protocol = "v4.channel.k8s.io"
	// tunnelPrefix + a SPDY protocol (portforward.k8s.io) is the websocket
	// subprotocol of a tunnelled port-forward.
	tunnelPrefix = "SPDY/3.1+"
	tunnelSuffix = ".k8s.io"

	streamTypeHeader = "streamType"
)

// The channels of v5.channel.k8s.io, by index.
const (
	chanStdin = iota
	chanStdout
	chanStderr
	chanError
	chanResize
)

const (
	// upgradeTimeout bounds the in-process SPDY handshake.
	upgradeTimeout = 30 * time.Second
	// statusWriteTimeout bounds the final status write to a client that
	// may have stopped reading.
	statusWriteTimeout = 10 * time.Second
)

// streamOpts are the streams an exec or attach URL was issued with.
type streamOpts struct {
	Stdin, Stdout, Stderr, TTY bool
}

// wsFront routes client-go's websocket protocols to the translators and
// everything else (SPDY, older websocket protocols) to the library as is.
type wsFront struct {
	lib      http.Handler
	inner    *connListener
	innerSrv *http.Server
	pending  *pendingStreams
	// idle closes a v5 websocket with no traffic (the library's stream
	// idle timeout, which the SPDY side has too).
	idle time.Duration
	log  *slog.Logger
}

func newWSFront(lib http.Handler, idle time.Duration, log *slog.Logger) *wsFront {
	inner := newConnListener()
	return &wsFront{
		lib:      lib,
		inner:    inner,
		innerSrv: &http.Server{Handler: lib, ReadHeaderTimeout: 30 * time.Second},
		pending:  &pendingStreams{m: map[string]pendingStream{}},
		idle:     idle,
		log:      log,
	}
}

// serveInner serves the in-process SPDY hop until close.
func (f *wsFront) serveInner() {
	if err := f.innerSrv.Serve(f.inner); err != nil && err != http.ErrServerClosed {
		f.log.Error("streaming: in-process SPDY hop stopped", "err", err)
	}
}

func (f *wsFront) close() {
	f.innerSrv.Close()
	f.inner.Close()
}

func (f *wsFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch kind := path.Base(path.Dir(r.URL.Path)); {
	case (kind == "exec" || kind == "attach") && wsstream.IsWebSocketRequestWithStreamCloseProtocol(r):
		// The websocket is upgraded before the library sees the token, so
		// an unknown one is refused here while a plain 404 is still
		// possible.
		opts, ok := f.pending.take(r.URL.Path)
		if !ok {
			http.NotFound(w, r)
			return
		}
		f.serveV5(w, r, opts)
	case kind == "portforward" && wsstream.IsWebSocketRequestWithTunnelingProtocol(r):
		f.serveTunnel(w, r)
	default:
		f.lib.ServeHTTP(w, r)
	}
}

// serveV5 answers a v5.channel.k8s.io exec or attach: the websocket's
// channels become the SPDY streams of the same request on the inner hop,
// and the library's final status (exit code or error) goes to the error
// channel once the output streams have ended.
func (f *wsFront) serveV5(w http.ResponseWriter, r *http.Request, o streamOpts) {
	chans := make([]wsstream.ChannelType, 5)
	chans[chanStdin] = channelIf(o.Stdin, wsstream.ReadChannel)
	chans[chanStdout] = channelIf(o.Stdout, wsstream.WriteChannel)
	chans[chanStderr] = channelIf(o.Stderr, wsstream.WriteChannel)
	chans[chanError] = wsstream.WriteChannel
	chans[chanResize] = wsstream.ReadChannel
	ws := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		v5Protocol: {Binary: true, Channels: chans},
	})
	ws.SetIdleTimeout(f.idle)
	_, streams, err := ws.Open(w, r)
	if err != nil {
		f.log.Warn("streaming: websocket upgrade failed", "path", r.URL.Path, "err", err)
		return
	}
	defer ws.Close()
	// An empty message on the lowest writable channel tells the client
	// the streams are open (what the library and the kubelet send).
	first := chanError
	switch {
	case o.Stdout:
		first = chanStdout
	case o.Stderr:
		first = chanStderr
	}
	if _, err := streams[first].Write([]byte{}); err != nil {
		return
	}
	status := f.relayV5(r, o, streams)
	ws.SetWriteDeadline(statusWriteTimeout)
	if _, err := streams[chanError].Write(status); err != nil {
		f.log.Debug("streaming: final status not delivered", "path", r.URL.Path, "err", err)
	}
}

func channelIf(on bool, t wsstream.ChannelType) wsstream.ChannelType {
	if on {
		return t
	}
	return wsstream.IgnoreChannel
}

// relayV5 runs the request over SPDY and returns the status JSON for the
// websocket's error channel.
func (f *wsFront) relayV5(r *http.Request, o streamOpts, ws []io.ReadWriteCloser) []byte {
	conn, resp, err := f.upgradeInner(r.Context(), r, []string{v4Protocol})
	if err != nil {
		return statusJSON(apierrors.NewInternalError(err).Status())
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return statusJSON(refusal(resp))
	}
	if p := resp.Header.Get(httpstream.HeaderProtocolVersion); p != v4Protocol {
		conn.Close()
		return statusJSON(apierrors.NewInternalError(fmt.Errorf("streaming: in-process hop chose protocol %q, want %s", p, v4Protocol)).Status())
	}
	sc, err := spdy.NewClientConnection(conn)
	if err != nil {
		conn.Close()
		return statusJSON(apierrors.NewInternalError(err).Status())
	}
	defer sc.Close()

	// The library expects its streams in this order (client-go's
	// remotecommand v4: error, stdin, stdout, stderr, resize).
	create := func(kind string) (httpstream.Stream, error) {
		h := http.Header{}
		h.Set(streamTypeHeader, kind)
		return sc.CreateStream(h)
	}
	errStream, err := create("error")
	if err != nil {
		return statusJSON(apierrors.NewInternalError(err).Status())
	}
	var stdin, stdout, stderr, resize httpstream.Stream
	for _, s := range []struct {
		on   bool
		kind string
		to   *httpstream.Stream
	}{
		{o.Stdin, "stdin", &stdin},
		{o.Stdout, "stdout", &stdout},
		{o.Stderr && !o.TTY, "stderr", &stderr},
		{o.TTY, "resize", &resize},
	} {
		if !s.on {
			continue
		}
		if *s.to, err = create(s.kind); err != nil {
			return statusJSON(apierrors.NewInternalError(err).Status())
		}
	}

	errDone := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(errStream, 1<<20))
		errDone <- b
	}()
	if stdin != nil {
		// The client's v5 close signal ends ws[chanStdin] with EOF, which
		// half-closes the SPDY stream: the process sees end of input.
		var once sync.Once
		go func() {
			defer once.Do(func() { stdin.Close() })
			io.Copy(stdin, ws[chanStdin])
		}()
		go func() {
			defer once.Do(func() { stdin.Close() })
			io.Copy(io.Discard, stdin)
		}()
	}
	if resize != nil {
		// Both sides carry the same JSON sizes; a copy is the translation.
		go func() {
			io.Copy(resize, ws[chanResize])
			resize.Close()
		}()
	} else {
		// The channel is open whatever the session; without a terminal
		// its messages have nowhere to go, and unread they would stall
		// the websocket's reader (and with it stdin).
		go io.Copy(io.Discard, ws[chanResize])
	}
	var outputs sync.WaitGroup
	for _, p := range []struct {
		from httpstream.Stream
		to   io.Writer
	}{{stdout, ws[chanStdout]}, {stderr, ws[chanStderr]}} {
		if p.from == nil {
			continue
		}
		outputs.Add(1)
		go func() {
			defer outputs.Done()
			if _, err := io.Copy(p.to, p.from); err != nil {
				io.Copy(io.Discard, p.from)
			}
		}()
	}
	outputs.Wait()
	// The library writes a status at the end of every exec and attach,
	// success included; the stream ends without one only when the hop
	// closed early (podunit shutting down).
	if b := <-errDone; len(b) > 0 {
		return b
	}
	return statusJSON(apierrors.NewInternalError(errors.New("streaming: in-process hop closed without a status")).Status())
}

// refusal is the status of an upgrade the library refused (e.g. an
// expired token): its HTTP code and the first line of its body.
func refusal(resp *http.Response) metav1.Status {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	// The API's reason for the code (NotFound, not "Not Found"); the
	// library's own words as the message.
	st := apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodPost, schema.GroupResource{}, "", msg, 0, false).Status()
	st.Message = msg
	return st
}

func statusJSON(s metav1.Status) []byte {
	if s.Kind == "" {
		s.Kind, s.APIVersion = "Status", "v1"
	}
	b, _ := json.Marshal(s) // strings and numbers: it cannot fail
	return b
}

// serveTunnel answers a port-forward with SPDY tunnelled in a websocket:
// the SPDY upgrade is asked of the library first, so its refusal (e.g.
// 404 for an unknown token) reaches the client as plain HTTP; on success
// the websocket is upgraded with the protocol the library chose and the
// bytes are relayed both ways, SPDY frames in binary messages.
func (f *wsFront) serveTunnel(w http.ResponseWriter, r *http.Request) {
	var protocols []string
	for _, p := range strings.Split(r.Header.Get(wsstream.WebSocketProtocolHeader), ",") {
		p = strings.TrimSpace(p)
		if strings.HasPrefix(p, tunnelPrefix) && strings.HasSuffix(p, tunnelSuffix) {
			protocols = append(protocols, strings.TrimPrefix(p, tunnelPrefix))
		}
	}
	if len(protocols) == 0 {
		http.Error(w, "unable to upgrade: no tunneling spdy protocols provided", http.StatusBadRequest)
		return
	}
	conn, resp, err := f.upgradeInner(r.Context(), r, protocols)
	if err != nil {
		f.log.Warn("streaming: in-process SPDY hop failed", "path", r.URL.Path, "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, io.LimitReader(resp.Body, 1<<20))
		return
	}
	chosen := tunnelPrefix + strings.TrimSpace(resp.Header.Get(httpstream.HeaderProtocolVersion))
	websocket.Server{
		Handshake: func(cfg *websocket.Config, _ *http.Request) error {
			for _, p := range cfg.Protocol {
				if p == chosen {
					cfg.Protocol = []string{chosen}
					return nil
				}
			}
			return fmt.Errorf("streaming: the library chose %q, which the client did not offer", chosen)
		},
		Handler: func(ws *websocket.Conn) {
			ws.PayloadType = websocket.BinaryFrame
			relay(ws, conn)
		},
	}.ServeHTTP(w, r)
}

// relay copies both ways until either side ends, then closes both.
func relay(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

// upgradeInner asks the library, over the in-process hop, to upgrade r's
// URL to SPDY with one of protocols. The response's body (a refusal) and
// the bytes after a 101 are read from the returned conn.
func (f *wsFront) upgradeInner(ctx context.Context, r *http.Request, protocols []string) (net.Conn, *http.Response, error) {
	conn, err := f.inner.DialContext(ctx, "", "")
	if err != nil {
		return nil, nil, err
	}
	req := &http.Request{
		Method:     http.MethodPost,
		URL:        f.innerURL(r),
		Host:       innerHost,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
	}
	req.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	req.Header.Set(httpstream.HeaderUpgrade, spdy.HeaderSpdy31)
	for _, p := range protocols {
		req.Header.Add(httpstream.HeaderProtocolVersion, p)
	}
	conn.SetDeadline(time.Now().Add(upgradeTimeout))
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("streaming: in-process upgrade request: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("streaming: in-process upgrade response: %w", err)
	}
	conn.SetDeadline(time.Time{})
	return bufferedConn{Conn: conn, r: br}, resp, nil
}

// innerURL is the request's URL on the in-process hop: plain HTTP even
// when clients come with TLS, since the bytes never leave the process.
func (f *wsFront) innerURL(r *http.Request) *url.URL {
	return &url.URL{Scheme: "http", Host: innerHost, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
}

// bufferedConn reads first what the response parser read ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// pendingStreams remembers which streams an exec or attach URL was issued
// with: the v5 translator must open exactly those on both sides, and the
// library keeps its requests to itself.
type pendingStreams struct {
	mu sync.Mutex
	m  map[string]pendingStream
}

type pendingStream struct {
	opts    streamOpts
	expires time.Time
}

// tokenTTL is the library's token lifetime (cri-streaming cacheTTL).
const tokenTTL = time.Minute

// add records the streams of the URL the library returned.
func (p *pendingStreams) add(rawURL string, opts streamOpts) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("streaming: parse issued URL: %w", err)
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range p.m {
		if now.After(v.expires) {
			delete(p.m, k)
		}
	}
	p.m[u.Path] = pendingStream{opts: opts, expires: now.Add(tokenTTL)}
	return nil
}

// take returns and forgets the streams of a URL path; false when the URL
// is unknown, already used over v5, or expired.
func (p *pendingStreams) take(urlPath string) (streamOpts, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[urlPath]
	delete(p.m, urlPath)
	if !ok || time.Now().After(v.expires) {
		return streamOpts{}, false
	}
	return v.opts, true
}

// connListener is a net.Listener whose connections are socket pairs made
// by DialContext: kernel-buffered like the kubelet's TCP hop to a runtime,
// but reachable only from inside podunit.
type connListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnListener() *connListener {
	return &connListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return innerAddr{} }

// DialContext ignores the address: every dial reaches this listener.
func (l *connListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("streaming: socketpair: %w", err)
	}
	server, err := fileConn(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	client, err := fileConn(fds[1])
	if err != nil {
		server.Close()
		return nil, err
	}
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		err = net.ErrClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	server.Close()
	client.Close()
	return nil, err
}

func fileConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "podunit-streaming-hop")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("streaming: socketpair conn: %w", err)
	}
	return innerConn{c}, nil
}

// innerConn gives the unnamed socket ends an address for logs and for
// net/http, which formats the remote address of every connection.
type innerConn struct{ net.Conn }

func (innerConn) LocalAddr() net.Addr  { return innerAddr{} }
func (innerConn) RemoteAddr() net.Addr { return innerAddr{} }

type innerAddr struct{}

func (innerAddr) Network() string { return "podunit" }
func (innerAddr) String() string  { return innerHost }
