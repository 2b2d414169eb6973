package streaming

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// client-go 1.37 (kubectl, crictl, critest) opens exec and attach with the
// websocket subprotocol v5.channel.k8s.io and port-forward with SPDY
// tunnelled through a websocket (SPDY/3.1+portforward.k8s.io).
// cri-streaming v0.37 negotiates only the older websocket protocols, and
// golang.org/x/net/websocket refuses the rest with 403. The kubelet (with
// ExtendWebSocketsToKubelet) and the API server meet the same client in
// front of a CRI streaming server: they translate v5 to SPDY
// (StreamTranslatorHandler) and unwrap the tunnel (TunnelingHandler in
// front of an UpgradeAwareHandler), then speak SPDY to the runtime.
// podunit does exactly that, with the SPDY side going to its own library
// handler over an in-process connection: one SPDY implementation, one
// token check, one runtime.

// innerHost names the in-process SPDY hop in URLs; it is never resolved.
const innerHost = "podunit-streaming.internal"

// wsFront routes client-go's websocket protocols to the translators and
// everything else (SPDY, older websocket protocols) to the library as is.
type wsFront struct {
	lib      http.Handler
	inner    *connListener
	innerSrv *http.Server
	// transport only dials: both translators take their dialer from it.
	transport *http.Transport
	pending   *pendingStreams
	log       *slog.Logger
}

func newWSFront(lib http.Handler, log *slog.Logger) *wsFront {
	inner := newConnListener()
	return &wsFront{
		lib:       lib,
		inner:     inner,
		innerSrv:  &http.Server{Handler: lib, ReadHeaderTimeout: 30 * time.Second},
		transport: &http.Transport{DialContext: inner.DialContext},
		pending:   &pendingStreams{m: map[string]pendingStream{}},
		log:       log,
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
		// The translator upgrades before the library sees the token, so an
		// unknown one is refused here while a plain 404 is still possible.
		opts, ok := f.pending.take(r.URL.Path)
		if !ok {
			http.NotFound(w, r)
			return
		}
		translator.NewStreamTranslatorHandler(f.innerURL(r), f.transport, 0, opts).ServeHTTP(w, r)
	case kind == "portforward" && wsstream.IsWebSocketRequestWithTunnelingProtocol(r):
		// The tunnel upgrades only after the library answered the SPDY
		// upgrade, and passes its refusal (e.g. 404) through otherwise.
		up := proxy.NewUpgradeAwareHandler(f.innerURL(r), f.transport, false, true, errorResponder{f.log})
		translator.NewTunnelingHandler(up).ServeHTTP(w, r)
	default:
		f.lib.ServeHTTP(w, r)
	}
}

// innerURL is the request's URL on the in-process hop: plain HTTP even
// when clients come with TLS, since the bytes never leave the process.
func (f *wsFront) innerURL(r *http.Request) *url.URL {
	return &url.URL{Scheme: "http", Host: innerHost, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
}

type errorResponder struct{ log *slog.Logger }

func (e errorResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	e.log.Warn("streaming: in-process SPDY hop failed", "path", r.URL.Path, "err", err)
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// pendingStreams remembers which streams an exec or attach URL was issued
// with: the v5 translator must open exactly those on both sides, and the
// library keeps its requests to itself.
type pendingStreams struct {
	mu sync.Mutex
	m  map[string]pendingStream
}

type pendingStream struct {
	opts    translator.Options
	expires time.Time
}

// tokenTTL is the library's token lifetime (cri-streaming cacheTTL).
const tokenTTL = time.Minute

// add records the streams of the URL the library returned.
func (p *pendingStreams) add(rawURL string, opts translator.Options) error {
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
func (p *pendingStreams) take(urlPath string) (translator.Options, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[urlPath]
	delete(p.m, urlPath)
	if !ok || time.Now().After(v.expires) {
		return translator.Options{}, false
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
