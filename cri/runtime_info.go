package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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
	var def string
	var features map[string]oci.Features
	if s.handlers != nil {
		def, features = s.handlers()
	} else {
		cfg := s.cfg()
		def, features = cfg.Runtime.DefaultHandler, make(map[string]oci.Features, len(cfg.Runtime.Handlers))
		for n := range cfg.Runtime.Handlers {
			features[n] = oci.Features{}
		}
	}
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

// podUserNamespaces is whether podunit itself runs pods in their own user
// namespace (RunPodSandbox's userns_options, idmapped rootfs and volumes).
// Until it does, no handler is advertised with user namespaces, whatever
// the handler could do: the kubelet would send hostUsers: false pods that
// then run in the host's user namespace.
const podUserNamespaces = false

// handlerFeatures is what the kubelet may rely on for one handler: what
// the handler and the kernel support (oci.Features, probed at start) and,
// for user namespaces, what podunit supports as well.
func handlerFeatures(f oci.Features) *runtimeapi.RuntimeHandlerFeatures {
	return &runtimeapi.RuntimeHandlerFeatures{
		RecursiveReadOnlyMounts: f.RecursiveReadOnly,
		UserNamespaces:          f.UserNamespaces && podUserNamespaces,
	}
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
