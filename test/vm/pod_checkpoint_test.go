//go:build vm

package vm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podConfig is a pod as the kubelet asks for one without
// shareProcessNamespace: a kubepods slice of its own, one PID namespace
// per container (CheckpointPod refuses a shared one).
func podConfig(name string) *runtimeapi.PodSandboxConfig {
	uid := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "vmtest", Uid: uid},
		LogDirectory: "/var/log/pods/vmtest_" + name + "_" + uid,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
		},
	}
}

func (n *node) removePod(t *testing.T, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Errorf("StopPodSandbox: %v", err)
	}
	if _, err := n.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Errorf("RemovePodSandbox: %v", err)
	}
}

func firstCount(t *testing.T, log string) int {
	t.Helper()
	f := strings.Fields(ssh(t, "head -n 1 "+log))
	if len(f) == 0 {
		t.Fatalf("%s is empty", log)
	}
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("%s: first line %q", log, f)
	}
	return n
}

// KEP-5823 on a real node (cgroup v2, criu 3.17 on the 6.1 kernel): a pod
// of two counters that live only in their shells' memory is checkpointed
// as one (its slice frozen through systemd while both are dumped, then
// thawed: both keep counting), removed, and restored as a new pod: each
// counter goes on from where it was, in its new CRI log.
func TestNodePodCheckpointRestore(t *testing.T) {
	n := criNode(t)
	pcfg := podConfig("podckpt")
	run, err := n.rt.RunPodSandbox(tctx(t, 3*time.Minute), &runtimeapi.RunPodSandboxRequest{Config: pcfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	pod := run.PodSandboxId
	podGone := false
	t.Cleanup(func() {
		if !podGone {
			n.removePod(t, pod)
		}
	})
	counter := `i=0; while true; do i=$((i+1)); echo $i; sleep 0.2; done`
	ids := []string{
		n.start(t, pod, pcfg, "a", nil, "sh", "-c", counter),
		n.start(t, pod, pcfg, "b", nil, "sh", "-c", counter),
	}
	time.Sleep(3 * time.Second)
	dir := fmt.Sprintf("/var/tmp/podunit-podckpt-%d", time.Now().UnixNano())
	ssh(t, "mkdir -m 0700 "+dir)
	t.Cleanup(func() { ssh(t, "rm -rf "+dir) })

	// Refused without changing anything: a container of the pod that is
	// named twice; the pod stays thawed.
	if _, err := n.rt.CheckpointPod(tctx(t, time.Minute), &runtimeapi.CheckpointPodRequest{
		PodSandboxId: pod, OutputPath: dir, ContainerIds: []string{ids[0], ids[0]},
	}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("CheckpointPod with a duplicate ID: %v", err)
	}
	if _, err := n.rt.CheckpointPod(tctx(t, 3*time.Minute), &runtimeapi.CheckpointPodRequest{
		PodSandboxId: pod, OutputPath: dir, ContainerIds: ids,
	}); err != nil {
		t.Fatalf("CheckpointPod: %v", err)
	}
	logA, logB := pcfg.LogDirectory+"/a/0.log", pcfg.LogDirectory+"/b/0.log"
	at := []int{lastCount(t, logA), lastCount(t, logB)}
	t.Logf("checkpointed at a=%d b=%d", at[0], at[1])
	files := ssh(t, "cd "+dir+" && find . -type f | sort")
	for _, want := range []string{"./pod.json", "./containers/" + ids[0] + ".tar", "./containers/" + ids[1] + ".tar"} {
		if !strings.Contains(files, want) {
			t.Errorf("checkpoint lacks %s:\n%s", want, files)
		}
	}
	slice := pcfg.Linux.CgroupParent
	if st := strings.TrimSpace(ssh(t, "systemctl show -P FreezerState "+slice)); st != "running" {
		t.Fatalf("slice %s after CheckpointPod: FreezerState %q", slice, st)
	}
	// Thawed: both still count.
	time.Sleep(time.Second)
	if now := lastCount(t, logA); now <= at[0] {
		t.Errorf("counter a stopped after the checkpoint: %d then %d", at[0], now)
	}
	n.removePod(t, pod)
	podGone = true

	rcfg := podConfig("podckpt-restored")
	var cfgs []*runtimeapi.ContainerConfig
	for _, name := range []string{"a", "b"} {
		cfgs = append(cfgs, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: busybox},
			Command:  []string{"sh", "-c", counter},
			LogPath:  name + "/0.log",
		})
	}
	rr, err := n.rt.RestorePod(tctx(t, 5*time.Minute), &runtimeapi.RestorePodRequest{
		CheckpointPath: dir, Config: rcfg, ContainerConfigs: cfgs,
	})
	if err != nil {
		t.Fatalf("RestorePod: %v", err)
	}
	t.Cleanup(func() { n.removePod(t, rr.PodSandboxId) })
	if len(rr.RestoredContainers) != 2 {
		t.Fatalf("restored %v", rr.RestoredContainers)
	}
	for _, c := range rr.RestoredContainers {
		st, err := n.rt.ContainerStatus(tctx(t, time.Minute), &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})
		if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Fatalf("restored %s before start: %v %v", c.Name, st.GetStatus().GetState(), err)
		}
		if _, err := n.rt.StartContainer(tctx(t, 3*time.Minute), &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			t.Fatalf("StartContainer %s (restore): %v", c.Name, err)
		}
	}
	time.Sleep(3 * time.Second)
	for _, c := range rr.RestoredContainers {
		log := rcfg.LogDirectory + "/" + c.Name + "/0.log"
		was := at[0]
		if c.Name == "b" {
			was = at[1]
		}
		got := firstCount(t, log)
		if got <= 1 || got > was+2 {
			t.Errorf("restored counter %s starts at %d; it was at %d at the checkpoint", c.Name, got, was)
		}
		if now := lastCount(t, log); now <= got {
			t.Errorf("restored counter %s does not count: %d then %d", c.Name, got, now)
		}
	}
}
