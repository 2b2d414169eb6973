package container

import (
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

func TestUserNamespaceOfContainer(t *testing.T) {
	m := func(h uint32) []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{ContainerId: 0, HostId: h, Length: 65536}}
	}
	pod := func(u *runtimeapi.UserNamespace, path string) *Pod {
		return &Pod{ID: "p", UserNSPath: path, Config: &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: u}},
		}}}
	}
	ctr := func(u *runtimeapi.UserNamespace) *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: u}},
		}}
	}
	podNS := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m(100000), Gids: m(200000)}
	node := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}
	tests := []struct {
		name   string
		pod    *Pod
		ctr    *runtimeapi.ContainerConfig
		mapped bool
		err    error
	}{
		{name: "host pod, no options", pod: pod(nil, ""), ctr: ctr(nil)},
		{name: "host pod, node", pod: pod(node, ""), ctr: ctr(node)},
		{name: "host pod, container asks for one", pod: pod(node, ""), ctr: ctr(podNS), err: errdefs.ErrInvalid},
		{name: "userns pod, same options", pod: pod(podNS, "/run/userns/p"), ctr: ctr(podNS), mapped: true},
		{name: "userns pod, container without options", pod: pod(podNS, "/run/userns/p"), ctr: ctr(nil), mapped: true},
		{name: "userns pod, container in the host's", pod: pod(podNS, "/run/userns/p"), ctr: ctr(node), err: errdefs.ErrInvalid},
		{name: "userns pod, other mappings", pod: pod(podNS, "/run/userns/p"),
			ctr: ctr(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m(300000), Gids: m(200000)}), err: errdefs.ErrInvalid},
		{name: "userns pod, bad mode", pod: pod(podNS, "/run/userns/p"),
			ctr: ctr(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}), err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := userNamespace(tt.pod, tt.ctr)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.mapped {
				if got != nil {
					t.Fatalf("idmap %+v for a container in the host's user namespace", got)
				}
				return
			}
			if got == nil || len(got.UIDs) != 1 || got.UIDs[0] != (specs.LinuxIDMapping{HostID: 100000, Size: 65536}) ||
				len(got.GIDs) != 1 || got.GIDs[0] != (specs.LinuxIDMapping{HostID: 200000, Size: 65536}) {
				t.Fatalf("idmap %+v, want the pod's", got)
			}
		})
	}
}
