package oci

import (
	"encoding/json"
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/podunit/podunit/errdefs"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzGenerateSpec feeds arbitrary ContainerConfig and PodSandboxConfig
// messages (protobuf wire bytes, so every field and nesting is reachable)
// plus an image config through CRI→OCI translation. GenerateSpec must
// never panic, must fail only with a podunit sentinel (the CRI layer maps
// those to status codes; anything else would be Unknown), and a spec it
// returns must keep the container inside its rootfs and cgroup.
// Seeds: testdata/fuzz/FuzzGenerateSpec.
func FuzzGenerateSpec(f *testing.F) {
	base := baseInput()
	cfg, _ := proto.Marshal(base.Config)
	sb, _ := proto.Marshal(base.SandboxConfig)
	f.Add(cfg, sb, "/srv", "1000:1000", "SIGTERM")
	f.Add([]byte{}, []byte{}, "", "", "")
	f.Fuzz(func(t *testing.T, cfgBytes, sbBytes []byte, workdir, user, stopSignal string) {
		in := baseInput()
		in.Config = &runtimeapi.ContainerConfig{}
		in.SandboxConfig = &runtimeapi.PodSandboxConfig{}
		if proto.Unmarshal(cfgBytes, in.Config) != nil || proto.Unmarshal(sbBytes, in.SandboxConfig) != nil {
			t.Skip()
		}
		in.Image.WorkingDir, in.Image.User, in.Image.StopSignal = workdir, user, stopSignal
		s, err := GenerateSpec(in)
		if err != nil {
			for _, sentinel := range []error{errdefs.ErrInvalid, errdefs.ErrUnimplemented, errdefs.ErrNotFound,
				errdefs.ErrPermission, errdefs.ErrPrecondition} {
				if errors.Is(err, sentinel) {
					return
				}
			}
			t.Fatalf("error without a podunit sentinel (would be gRPC Unknown): %v", err)
		}
		if s.Root == nil || s.Root.Path != in.RootfsPath {
			t.Fatalf("root %+v, want %s", s.Root, in.RootfsPath)
		}
		if s.Linux == nil || s.Linux.CgroupsPath != in.CgroupsPath {
			t.Fatalf("cgroups path %+v, want %s", s.Linux, in.CgroupsPath)
		}
		for _, m := range s.Mounts {
			if !path.IsAbs(m.Destination) || hasDotDot(m.Destination) {
				t.Fatalf("mount destination %q is not absolute and clean", m.Destination)
			}
			if m.Type == "bind" && hasDotDot(m.Source) {
				t.Fatalf("bind mount source %q climbs with ..", m.Source)
			}
		}
		if s.Process != nil && s.Process.Cwd != "" && !strings.HasPrefix(s.Process.Cwd, "/") {
			t.Fatalf("cwd %q is relative", s.Process.Cwd)
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("spec does not encode: %v", err)
		}
	})
}
