package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
		Features:        &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
	}
	if req.GetVerbose() {
		resp.Info = map[string]string{"config": s.configJSON()}
	}
	return resp, nil
}

func (s *Server) runtimeHandlers() []*runtimeapi.RuntimeHandler {
	handlers := s.cfg().Runtime.Handlers
	names := make([]string, 0, len(handlers))
	for n := range handlers {
		names = append(names, n)
	}
	sort.Strings(names)
	// The default handler is also reachable under the empty name, which is
	// what the kubelet sends when a pod has no RuntimeClass.
	out := []*runtimeapi.RuntimeHandler{{Name: "", Features: handlerFeatures()}}
	for _, n := range names {
		out = append(out, &runtimeapi.RuntimeHandler{Name: n, Features: handlerFeatures()})
	}
	return out
}

// handlerFeatures: recursive read-only mounts need mount_setattr (Linux
// 5.12+), which runc and crun both use; user namespaces are not offered.
func handlerFeatures() *runtimeapi.RuntimeHandlerFeatures {
	return &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: kernelAtLeast(5, 12)}
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

func kernelAtLeast(major, minor int) bool {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
