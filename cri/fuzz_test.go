package cri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/container"
	"github.com/podunit/podunit/sandbox"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/unitprops"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fuzzServer is containerServer for a fuzz target: the real sandbox and
// container managers on fake systemd, network, images and runtime.
func fuzzServer(f *testing.F) *Server {
	if os.Geteuid() != 0 {
		f.Skip("pod namespaces need root")
	}
	dir := f.TempDir()
	pods, err := sandbox.New(sandbox.Options{
		StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"),
		Network: podTestNet{}, Systemd: systemd.NewFake(), Handlers: []string{"runc"},
		ParentSlice: config.Default().Systemd.ParentSlice, OpTimeout: config.Default().Systemd.CallTimeout.D(),
	})
	if err != nil {
		f.Fatal(err)
	}
	ctrs, err := container.New(container.Options{
		StateDir: filepath.Join(dir, "cstate"), RunDir: filepath.Join(dir, "crun"), Self: "/podunit",
		Caps: unitprops.Caps{SystemdVersion: 252}, DefaultHandler: config.Default().Runtime.DefaultHandler,
	}, container.Deps{
		Systemd: systemd.NewFake(), Images: ctrTestImages{dir: filepath.Join(dir, "rootfs")},
		Pods: container.SandboxPods(pods), Runtimes: map[string]container.Runtime{"runc": ctrTestRuntime{}},
	})
	if err != nil {
		f.Fatal(err)
	}
	pods.SetContainers(ctrs)
	s := &Server{pods: pods, ctrs: ctrs}
	f.Cleanup(func() {
		for _, p := range pods.List(context.Background()) {
			pods.Remove(context.Background(), p.ID)
		}
	})
	return s
}

// FuzzRequestValidation drives the pod and container RPCs with fuzzed IDs,
// names, namespaces, label selectors, paths (with "..", absolute, huge,
// non-UTF-8) against the real managers. No input may panic, every error
// must carry a podunit sentinel (never gRPC Unknown), a path that climbs
// out of its directory must be refused, and what was created is removable.
// Seeds: testdata/fuzz/FuzzRequestValidation.
func FuzzRequestValidation(f *testing.F) {
	s := fuzzServer(f)
	ctx := context.Background()
	pod, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: hostPod(testPod("fuzz-base", nil))})
	if err != nil {
		f.Fatal(err)
	}
	base := pod.PodSandboxId
	f.Add(uint8(0), "", "web", "ns", "app", "x", "/data", "web.log")
	f.Add(uint8(1), base[:6], "c", "ns", "a", "b", "/a/../../etc", "../escape.log")
	f.Add(uint8(2), base, "c\xff", "n\x00s", "k=v,w", "!", "", "/abs.log")
	f.Add(uint8(3), "zz", strings.Repeat("n", 5000), "ns", "", "", "relative/path", "a/../../b.log")
	f.Fuzz(func(t *testing.T, kind uint8, id, name, ns, key, val, p, logPath string) {
		check := func(what string, err error) {
			if err == nil {
				return
			}
			if c := status.Code(ToStatus(err)); c == codes.Unknown {
				t.Fatalf("%s: error maps to Unknown: %v", what, err)
			}
		}
		labels := map[string]string{key: val}
		switch kind % 6 {
		case 0:
			cfg := hostPod(testPod(name, labels))
			cfg.Metadata.Namespace = ns
			cfg.Hostname = name
			cfg.LogDirectory = filepath.Join(t.TempDir(), "logs") // a fuzzed one would write anywhere
			cfg.Linux.CgroupParent = p
			r, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: key})
			check("RunPodSandbox", err)
			if err == nil {
				if strings.Contains(p, "..") && strings.Contains(p, "/") {
					t.Fatalf("cgroup parent %q with .. accepted", p)
				}
				_, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: r.PodSandboxId})
				check("RemovePodSandbox", err)
				if err != nil {
					t.Fatalf("cannot remove the pod it created: %v", err)
				}
			}
		case 1:
			target := id
			if id == "" {
				target = base
			}
			cfg := &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: name},
				Image:    &runtimeapi.ImageSpec{Image: ns},
				Labels:   labels,
				Mounts:   []*runtimeapi.Mount{{ContainerPath: p, HostPath: val}},
				LogPath:  logPath,
			}
			r, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: target, Config: cfg})
			check("CreateContainer", err)
			if err == nil {
				for _, bad := range []string{p, val} {
					if hasDotDotElem(bad) {
						t.Fatalf("mount path %q with .. accepted", bad)
					}
				}
				if hasDotDotElem(logPath) || filepath.IsAbs(logPath) {
					t.Fatalf("log path %q accepted", logPath)
				}
				_, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: r.ContainerId})
				if err != nil {
					t.Fatalf("cannot remove the container it created: %v", err)
				}
			}
		case 2:
			_, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id, LabelSelector: labels}})
			check("ListPodSandbox", err)
			_, err = s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id, PodSandboxId: name, LabelSelector: labels}})
			check("ListContainers", err)
		case 3:
			if strings.HasPrefix(base, id) {
				return // would resolve to the base pod
			}
			_, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			check("PodSandboxStatus", err)
			_, err = s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			check("StopPodSandbox", err)
			_, err = s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			check("RemovePodSandbox", err)
		case 4:
			_, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			check("ContainerStatus", err)
			_, err = s.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			check("StartContainer", err)
			_, err = s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
			check("StopContainer", err)
			_, err = s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			check("RemoveContainer", err)
		case 5:
			_, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
				Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: val, CpusetMems: p}})
			check("UpdateContainerResources", err)
		}
	})
}

// hostPod puts the pod in the node's network and IPC namespaces, so it
// has no namespace pins or shm mount: the fuzzing engine kills its
// workers without running cleanups, and their mounts would outlive them.
func hostPod(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
	c.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	c.Linux.SecurityContext.NamespaceOptions.Ipc = runtimeapi.NamespaceMode_NODE
	return c
}

func hasDotDotElem(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}
