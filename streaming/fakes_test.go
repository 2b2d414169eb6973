package streaming

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

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
	s, err := New(Config{}, d)
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
