package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
)

func (s *Server) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           kubeAPIVersion,
		RuntimeName:       RuntimeName,
		RuntimeVersion:    s.version,
		RuntimeApiVersion: RuntimeAPIVersion,
	}, nil
}

func (s *Server) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	runtimeCond := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.sd.Ping(pctx); err != nil {
		runtimeCond.Status = false
		runtimeCond.Reason = "SystemdUnreachable"
		runtimeCond.Message = err.Error()
	}
	netCond := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if err := s.network(ctx); err != nil {
		netCond.Status = false
		netCond.Reason = "NetworkPluginNotReady"
		netCond.Message = err.Error()
	}
	resp := &runtimeapi.StatusResponse{
		Status:          &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{runtimeCond, netCond}},
		RuntimeHandlers: s.runtimeHandlers(),
		Features:        &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true, MountOptions: true},
	}
	if req.GetVerbose() {
		resp.Info = map[string]string{"config": s.configJSON()}
	}
	return resp, nil
}

func (s *Server) runtimeHandlers() []*runtimeapi.RuntimeHandler {
	// Names and features come from one read, so a reload never shows a
	// handler with another's (or no longer probed) features.
	def, features := s.probedHandlers()
	names := make([]string, 0, len(features))
	for n := range features {
		names = append(names, n)
	}
	sort.Strings(names)
	// The default handler is also reachable under the empty name, which is
	// what the kubelet sends when a pod has no RuntimeClass.
	out := []*runtimeapi.RuntimeHandler{{Name: "", Features: handlerFeatures(features[def])}}
	for _, n := range names {
		out = append(out, &runtimeapi.RuntimeHandler{Name: n, Features: handlerFeatures(features[n])})
	}
	return out
}

// probedHandlers are the default handler's name and every handler's
// features: the container manager's, which follow reloads; without one,
// the configured handlers with none.
func (s *Server) probedHandlers() (string, map[string]oci.Features) {
	if s.handlers != nil {
		return s.handlers()
	}
	cfg := s.cfg()
	features := make(map[string]oci.Features, len(cfg.Runtime.Handlers))
	for n := range cfg.Runtime.Handlers {
		features[n] = oci.Features{}
	}
	return cfg.Runtime.DefaultHandler, features
}

// handlerFeatures is what the kubelet may rely on for one handler: what
// the handler and the kernel support (oci.Features, probed at start). A
// handler with user namespaces runs hostUsers: false pods: podunit pins
// the pod's user namespace and idmaps the containers' root filesystems,
// the handler joins the namespace and idmaps the volumes.
func handlerFeatures(f oci.Features) *runtimeapi.RuntimeHandlerFeatures {
	return &runtimeapi.RuntimeHandlerFeatures{
		RecursiveReadOnlyMounts: f.RecursiveReadOnly,
		UserNamespaces:          f.UserNamespaces,
	}
}

// checkUserNamespace refuses a pod in a user namespace of its own on a
// handler that cannot run it (Debian's runc 1.1 has no idmapped mounts),
// which the kubelet never sends when it reads the handler's features.
// Malformed options are the request's fault and say so first.
func (s *Server) checkUserNamespace(cfg *runtimeapi.PodSandboxConfig, handler string) error {
	uids, _, err := oci.UserNamespaceMappings(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions())
	if err != nil || uids == nil {
		return err
	}
	def, features := s.probedHandlers()
	name := handler
	if name == "" {
		name = def
	}
	f, ok := features[name]
	if !ok {
		return nil // Run refuses an unknown handler
	}
	if !f.UserNamespaces {
		return fmt.Errorf("runtime handler %q (%s %s) cannot run pods in a user namespace (no idmapped mounts, or the kernel lacks user namespaces or mount_setattr): %w",
			name, f.Source, f.Version, errdefs.ErrPrecondition)
	}
	return nil
}

func (s *Server) RuntimeConfig(ctx context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{
		Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_SYSTEMD},
	}, nil
}

func (s *Server) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	// The kubelet sends the pod CIDR here; CNI plugins configured on the
	// node own addressing, so there is nothing to change.
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// cniConfigured reports why networking is not ready, or nil.
func cniConfigured(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("no CNI configuration: %w", err)
	}
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			if !e.IsDir() {
				return nil
			}
		}
	}
	return fmt.Errorf("no CNI configuration file (*.conf, *.conflist, *.json) in %s", dir)
}
