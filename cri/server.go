// Package cri serves the CRI v1 RuntimeService and ImageService. It is a
// thin translation layer: every RPC converts the request, calls one of
// podunit's packages and converts the answer back.
package cri

import (
	"context"
	"log/slog"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/imagestore"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/podlife"
	"github.com/podunit/podunit/sandbox"
	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Name and API version reported by Version.
const (
	RuntimeName       = "podunit"
	RuntimeAPIVersion = "v1"
	kubeAPIVersion    = "0.1.0"
)

// Streamer hands out the URLs of exec, attach and port-forward sessions:
// streaming.Remote, which registers them with the session process.
type Streamer interface {
	Exec(context.Context, *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	Attach(context.Context, *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	PortForward(context.Context, *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// Deps are the packages the server translates to.
type Deps struct {
	// Config returns the running configuration, which a reload replaces.
	Config     func() *config.Config
	Systemd    systemd.Conn
	Images     *imagestore.Store
	Pods       *sandbox.Manager
	Containers *container.Manager
	Logs       LogReopener
	Stream     Streamer
	Stats      StatsDeps
	// Handlers are the default handler and each handler in force with its
	// features (container.Manager.HandlerFeatures: probed at start and at
	// a reload that changes the handlers), advertised in Status. Nil
	// advertises the configured handlers with no features.
	Handlers func() (defaultHandler string, features map[string]oci.Features)
	Version  string
	Logger   *slog.Logger
	// Network reports whether pod networking is configured; nil means
	// the CNI configuration directory is inspected.
	Network func(ctx context.Context) error
}

// Server implements runtimeapi.RuntimeServiceServer and ImageServiceServer.
// RPCs whose feature has not landed answer Unimplemented through the
// embedded defaults.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	cfg    func() *config.Config
	sd     systemd.Conn
	images *imagestore.Store
	pods   *sandbox.Manager
	ctrs   *container.Manager
	// life stops and removes pods and creates containers: what spans
	// both managers goes through it, never through pods or ctrs alone.
	life     *podlife.Pods
	logs     LogReopener
	stream   Streamer
	stats    StatsDeps
	version  string
	handlers func() (string, map[string]oci.Features)
	log      *slog.Logger
	network  func(ctx context.Context) error
	// removed is the last status of recently removed pods, for the
	// container events that outlive them (GetContainerEvents).
	removed removedPods
}

// New builds the server from its dependencies.
func New(d Deps) *Server {
	s := &Server{cfg: d.Config, sd: d.Systemd, images: d.Images, pods: d.Pods, ctrs: d.Containers, logs: d.Logs, stream: d.Stream, stats: d.Stats, version: d.Version, handlers: d.Handlers, log: d.Logger, network: d.Network}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.life = podlife.New(s.pods, s.ctrs, s.log)
	if s.network == nil {
		s.network = func(context.Context) error { return cniConfigured(s.cfg().CNI.ConfDir) }
	}
	return s
}
