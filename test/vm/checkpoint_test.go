//go:build vm

package vm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// lastCount is the last number in a counter's CRI log in the guest.
func lastCount(t *testing.T, log string) int {
	t.Helper()
	f := strings.Fields(ssh(t, "tail -n 1 "+log))
	if len(f) == 0 {
		t.Fatalf("%s is empty", log)
	}
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("%s: last line %q", log, f)
	}
	return n
}

// KEP-2008 on a real node: a counter that lives only in a shell's memory
// is checkpointed over CRI (and keeps running), removed, and created again
// from the archive: it goes on counting from where it was, in its new CRI
// log. The harness' kernel cannot run Debian 12's criu 3.17 (see
// container/checkpoint_integration_test.go); the node's 6.1 kernel can.
func TestNodeCheckpointRestore(t *testing.T) {
	n := criNode(t)
	pod, pcfg := n.pod(t, "checkpoint")
	id := n.start(t, pod, pcfg, "counter", nil, "sh", "-c", `i=0; while true; do i=$((i+1)); echo $i; sleep 0.2; done`)
	time.Sleep(3 * time.Second)
	loc := fmt.Sprintf("/var/tmp/podunit-checkpoint-%d.tar", time.Now().UnixNano())
	t.Cleanup(func() { ssh(t, "rm -f "+loc) })
	if _, err := n.rt.CheckpointContainer(tctx(t, 3*time.Minute), &runtimeapi.CheckpointContainerRequest{
		ContainerId: id, Location: loc, Timeout: 120,
	}); err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}
	at := lastCount(t, pcfg.LogDirectory+"/counter/0.log")
	if list := ssh(t, "tar -tf "+loc); !strings.Contains(list, "checkpoint/inventory.img") || !strings.Contains(list, "config.dump") ||
		!strings.Contains(list, "spec.dump") {
		t.Errorf("archive %s:\n%s", loc, list)
	}
	st, err := n.rt.ContainerStatus(tctx(t, time.Minute), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the checkpoint: %v %v", st.GetStatus().GetState(), err)
	}
	if _, err := n.rt.StopContainer(tctx(t, time.Minute), &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.rt.RemoveContainer(tctx(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}

	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "counter", Attempt: 1},
		Image:    &runtimeapi.ImageSpec{Image: loc},
		LogPath:  "counter/1.log",
	}
	c, err := n.rt.CreateContainer(tctx(t, 3*time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: pcfg})
	if err != nil {
		t.Fatalf("CreateContainer from %s: %v", loc, err)
	}
	if _, err := n.rt.StartContainer(tctx(t, 3*time.Minute), &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatalf("StartContainer (restore): %v", err)
	}
	time.Sleep(3 * time.Second)
	first := strings.Fields(ssh(t, "head -n 1 "+pcfg.LogDirectory+"/counter/1.log"))
	got, _ := strconv.Atoi(first[len(first)-1])
	if got <= 1 || got > at+2 {
		t.Fatalf("restored counter starts at %d; it was at %d at the checkpoint", got, at)
	}
	if now := lastCount(t, pcfg.LogDirectory+"/counter/1.log"); now <= got {
		t.Errorf("restored counter does not count: %d then %d", got, now)
	}
	// The restored init is the unit's main process.
	main := strings.TrimSpace(ssh(t, "systemctl show -P MainPID podunit-ctr-"+c.ContainerId+".service"))
	if main == "" || main == "0" {
		t.Errorf("restored unit has no main PID")
	}
}
