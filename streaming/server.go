// Package streaming serves the CRI's Exec, Attach and PortForward URLs with
// the k8s.io/cri-streaming server (SPDY and websocket handling, single-use
// tokens with expiry) and implements what that server calls back into:
// exec handed to its Executor (container.Manager.Exec, which runs the one
// exec of package oci), attach to a container's stdin FIFO, the log
// relay's output taps and a tty container's terminal, and port forwarding
// inside a pod's network namespace. See docs/streaming.md for how attach works without a shim.
package streaming

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	lib "k8s.io/cri-streaming/pkg/streaming"

	"github.com/podunit/podunit/errdefs"
)

// Config configures the streaming server.
type Config struct {
	// Address is host:port (streaming.address); port 0 picks a free port.
	Address string
	// TLSCert and TLSKey are PEM files; both empty serves plain HTTP.
	TLSCert, TLSKey string
	// IdleTimeout closes a stream with no traffic; zero keeps the
	// library's default (4h).
	IdleTimeout time.Duration
}

// Deps are the parts of podunit the streaming server calls into.
type Deps struct {
	Containers Containers
	Pods       Pods
	// Exec runs commands in containers (container.Manager).
	Exec Executor
	// Output follows non-TTY output for attach; nil uses JournalFollower.
	Output OutputSource
	// Terminals holds tty containers' terminals; nil refuses attach to
	// them.
	Terminals Terminals
	Logger    *slog.Logger
}

// Server is podunit's streaming server. Create it with New, run it with
// Serve, and answer the CRI calls with Exec, Attach and PortForward.
type Server struct {
	lib   lib.Server
	lis   net.Listener
	h     *handler
	front *wsFront
	http  *http.Server
	url   *url.URL
	log   *slog.Logger

	closeOnce sync.Once
}

// New listens on cfg.Address and prepares the server; the URLs it hands
// out already carry the real port.
func New(cfg Config, d Deps) (*Server, error) {
	if d.Containers == nil || d.Pods == nil || d.Exec == nil {
		return nil, fmt.Errorf("streaming: Containers, Pods and Exec are required: %w", errdefs.ErrInvalid)
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Output == nil {
		d.Output = JournalFollower{}
	}
	addr := cfg.Address
	if addr == "" {
		return nil, fmt.Errorf("streaming: listen address is required: %w", errdefs.ErrInvalid)
	}
	var tlsCfg *tls.Config
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, fmt.Errorf("streaming: tls cert and key go together: %w", errdefs.ErrInvalid)
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("streaming: load TLS key pair: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("streaming: listen on %s: %w", addr, err)
	}
	base := &url.URL{Scheme: "http", Host: advertised(lis.Addr().(*net.TCPAddr))}
	if tlsCfg != nil {
		base.Scheme = "https"
		lis = tls.NewListener(lis, tlsCfg)
	}
	lc := lib.DefaultConfig
	lc.Addr = lis.Addr().String()
	lc.BaseURL = base
	if cfg.IdleTimeout > 0 {
		lc.StreamIdleTimeout = cfg.IdleTimeout
	}
	h := &handler{d: d, log: d.Logger}
	ls, err := lib.NewServer(lc, h)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("streaming: %w", err)
	}
	// The library's own Start listens again and rewrites its base URL
	// while requests may read it; serving its handler on our listener
	// avoids both.
	front := newWSFront(ls, lc.StreamIdleTimeout, d.Logger)
	return &Server{
		lib: ls, lis: lis, h: h, front: front, url: base, log: d.Logger,
		http: &http.Server{Handler: front, ReadHeaderTimeout: 30 * time.Second},
	}, nil
}

// advertised is the host:port put in URLs: a wildcard listen address is
// not dialable, and the kubelet runs on this node, so it gets loopback.
func advertised(a *net.TCPAddr) string {
	ip := a.IP
	switch {
	case ip == nil || ip.Equal(net.IPv4zero):
		ip = net.IPv4(127, 0, 0, 1)
	case ip.Equal(net.IPv6unspecified):
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}

// URL is the base every streaming URL starts with.
func (s *Server) URL() string { return s.url.String() }

// Serve serves until Close; it returns nil after Close.
func (s *Server) Serve() error {
	s.log.Info("streaming server listening", "url", s.url.String())
	go s.front.serveInner()
	err := s.http.Serve(s.lis)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the server and its open streams.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.http.Close()
		s.lis.Close()
		s.front.close()
	})
	return err
}

// Exec checks the request and the container and returns a single-use URL.
func (s *Server) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if err := checkStreams(req.GetContainerId(), req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr()); err != nil {
		return nil, err
	}
	if len(req.GetCmd()) == 0 {
		return nil, fmt.Errorf("exec needs a command: %w", errdefs.ErrInvalid)
	}
	if _, err := s.h.running(ctx, req.GetContainerId()); err != nil {
		return nil, err
	}
	resp, err := s.lib.GetExec(req)
	if err != nil {
		return nil, err
	}
	if err := s.remember(resp.GetUrl(), req); err != nil {
		return nil, err
	}
	return resp, nil
}

// Attach checks the request and the container and returns a single-use URL.
func (s *Server) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if err := checkStreams(req.GetContainerId(), req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr()); err != nil {
		return nil, err
	}
	if _, err := s.h.running(ctx, req.GetContainerId()); err != nil {
		return nil, err
	}
	resp, err := s.lib.GetAttach(req)
	if err != nil {
		return nil, err
	}
	if err := s.remember(resp.GetUrl(), req); err != nil {
		return nil, err
	}
	return resp, nil
}

// remember keeps the streams a URL was issued for: the websocket front
// needs them before the library has seen the token.
func (s *Server) remember(url string, req interface {
	GetStdin() bool
	GetStdout() bool
	GetStderr() bool
	GetTty() bool
}) error {
	return s.front.pending.add(url, streamOpts{
		Stdin: req.GetStdin(), Stdout: req.GetStdout(), Stderr: req.GetStderr(), TTY: req.GetTty(),
	})
}

// PortForward checks that the pod exists and returns a single-use URL.
func (s *Server) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if err := checkPortForward(req); err != nil {
		return nil, err
	}
	if _, err := s.h.d.Pods.NetNSPath(ctx, req.GetPodSandboxId()); err != nil {
		return nil, fmt.Errorf("port-forward to pod %s: %w", req.GetPodSandboxId(), err)
	}
	return s.lib.GetPortForward(req)
}

// checkPortForward checks a port-forward request's own fields.
func checkPortForward(req *runtimeapi.PortForwardRequest) error {
	if req.GetPodSandboxId() == "" {
		return fmt.Errorf("pod_sandbox_id is required: %w", errdefs.ErrInvalid)
	}
	for _, p := range req.GetPort() {
		if p <= 0 || p > 65535 {
			return fmt.Errorf("port %d out of range: %w", p, errdefs.ErrInvalid)
		}
	}
	return nil
}

// checkStreams repeats the library's request checks with podunit's error
// kinds, so the library's own (gRPC status) errors are never reached.
func checkStreams(id string, tty, stdin, stdout, stderr bool) error {
	switch {
	case id == "":
		return fmt.Errorf("container_id is required: %w", errdefs.ErrInvalid)
	case tty && stderr:
		return fmt.Errorf("tty and stderr cannot both be set: a terminal has one output: %w", errdefs.ErrInvalid)
	case !stdin && !stdout && !stderr:
		return fmt.Errorf("one of stdin, stdout and stderr must be set: %w", errdefs.ErrInvalid)
	}
	return nil
}
