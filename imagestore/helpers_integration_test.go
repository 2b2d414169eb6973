//go:build integration

package imagestore

// Integration tests: run as root on the host with the test registry of
// shared/critest (127.0.0.1:5000, images from images.sh):
//
//	go test -tags integration,containers_image_openpgp,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper ./imagestore/
//
// Stores live under /var/tmp (overlay needs a real, non-overlayfs directory).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const testRegistry = "127.0.0.1:5000"

func TestMain(m *testing.M) {
	if Reexec() {
		return
	}
	if spec := os.Getenv(reopenHelperEnv); spec != "" {
		if err := reopenHelper(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(mountHelperEnv); spec != "" {
		if err := mountHelper(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if c, err := net.DialTimeout("tcp", testRegistry, 2*time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "test registry %s not reachable (run shared/critest/images.sh): %v\n", testRegistry, err)
		os.Exit(1)
	} else {
		c.Close()
	}
	os.Exit(m.Run())
}

// registry is one [[registry]] table of a test registries.conf.
type registry struct {
	prefix, location string
	mirrors          []string
	blocked          bool
}

func writeRegistriesConf(t testing.TB, dir string, regs ...registry) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("unqualified-search-registries = []\n")
	for _, r := range regs {
		fmt.Fprintf(&b, "\n[[registry]]\nprefix = %q\nlocation = %q\ninsecure = true\nblocked = %v\n", r.prefix, r.location, r.blocked)
		for _, m := range r.mirrors {
			fmt.Fprintf(&b, "[[registry.mirror]]\nlocation = %q\ninsecure = true\n", m)
		}
	}
	p := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// critestRegistries sends the names critest uses to the local registry.
func critestRegistries() []registry {
	var regs []registry
	for _, p := range []string{"gcr.io", "registry.k8s.io", "k8s.gcr.io", "docker.io", testRegistry} {
		regs = append(regs, registry{prefix: p, location: testRegistry})
	}
	return regs
}

type testEnv struct {
	dir   string
	opts  Options
	store *Store
}

// newTestEnv opens a fresh store; extra registries come first so they win.
func newTestEnv(t testing.TB, tweak func(*Options), regs ...registry) *testEnv {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "podunit-imagestore-")
	if err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testOptions(filepath.Join(dir, "root"), filepath.Join(dir, "run"))
	o.RegistriesConf = writeRegistriesConf(t, dir, append(regs, critestRegistries()...)...)
	o.PolicyPath = policy
	o.AuthFile = filepath.Join(dir, "auth.json")
	o.PullProgressTimeout = 30 * time.Second
	o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if tweak != nil {
		tweak(&o)
	}
	env := &testEnv{dir: dir, opts: o}
	env.open(t)
	t.Cleanup(func() {
		if env.store != nil {
			// A pull its caller abandoned may still be ending, as Close
			// waits for; storage must not shut down under its unpack.
			env.store.pulls.cancelAll()
			_, _ = env.store.store.Shutdown(true)
		}
		for _, m := range mountsUnder(t, dir) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		_ = os.RemoveAll(dir)
	})
	return env
}

func (e *testEnv) open(t testing.TB) {
	t.Helper()
	s, err := New(context.Background(), e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.store = s
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// proxy is an HTTP front for the test registry that can require basic
// auth, count blob downloads and stall them.
type proxy struct {
	addr string

	mu        sync.Mutex
	blobGets  map[string]int // path -> GETs
	requests  int
	user      string // if set, basic auth is required
	password  string
	slowFirst time.Duration // delay before answering each request
	stallBlob bool          // send half of every layer blob, then hang
	corrupt   bool          // flip a byte in the middle of every layer blob
	pad       bool          // send 1 MiB more than every layer blob
	stalled   chan struct{} // closed when a stalled client goes away
}

func newProxy(t *testing.T, configure func(*proxy)) *proxy {
	t.Helper()
	p := &proxy{blobGets: map[string]int{}, stalled: make(chan struct{})}
	if configure != nil {
		configure(p)
	}
	target, _ := url.Parse("http://" + testRegistry)
	rp := httputil.NewSingleHostReverseProxy(target)
	var closeStalled sync.Once
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests++
		user, password, delay, stall, corrupt, pad := p.user, p.password, p.slowFirst, p.stallBlob, p.corrupt, p.pad
		p.mu.Unlock()
		if user != "" {
			u, pw, ok := r.BasicAuth()
			if !ok || u != user || pw != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="podunit-test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		isBlob := r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/")
		if isBlob {
			p.mu.Lock()
			p.blobGets[r.URL.Path]++
			p.mu.Unlock()
		}
		if isBlob && stall {
			p.stallBlobResponse(w, r, func() { closeStalled.Do(func() { close(p.stalled) }) })
			return
		}
		if isBlob && corrupt {
			corruptBlobResponse(w, r)
			return
		}
		if isBlob && pad {
			paddedBlobResponse(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.addr = ln.Addr().String()
	return p
}

// upstreamBlob fetches the blob from the test registry and sends its
// status and headers; the body is the caller's to send. ok is false when
// the registry could not be reached (the client has its answer then).
func upstreamBlob(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	resp, err := http.Get("http://" + testRegistry + r.URL.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return nil, false
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	return body, true
}

// stallBlobResponse sends the first half of the blob and then nothing
// until the client hangs up. Small blobs (the config) pass whole, so the
// pull gets as far as the layers.
func (p *proxy) stallBlobResponse(w http.ResponseWriter, r *http.Request, clientGone func()) {
	body, ok := upstreamBlob(w, r)
	if !ok {
		return
	}
	if len(body) < 4096 {
		_, _ = w.Write(body)
		return
	}
	_, _ = w.Write(body[:len(body)/2])
	w.(http.Flusher).Flush()
	<-r.Context().Done()
	clientGone()
}

// corruptBlobResponse sends the blob with one byte changed, except small
// blobs (the config), so the pull gets as far as the layers.
func corruptBlobResponse(w http.ResponseWriter, r *http.Request) {
	body, ok := upstreamBlob(w, r)
	if !ok {
		return
	}
	if len(body) >= 4096 {
		body[len(body)/2] ^= 0xff
	}
	_, _ = w.Write(body)
}

// paddedBlobResponse sends the blob and then 1 MiB of zeros, without a
// length, except small blobs (the config).
func paddedBlobResponse(w http.ResponseWriter, r *http.Request) {
	resp, err := http.Get("http://" + testRegistry + r.URL.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if len(body) >= 4096 {
		w.Header().Del("Content-Length")
		body = append(body, make([]byte, 1<<20)...)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

func (p *proxy) blobCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.blobGets {
		out[k] = v
	}
	return out
}

// silentServer accepts connections and never answers: a registry that hangs.
func silentServer(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 64)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), ch
}
