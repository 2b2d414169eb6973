//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestTornIPAMReservationIsReleased: podunit killed while host-local was
// between creating an address's file and writing the pod's ID into it
// leaves a reservation no DEL can release (seen by the kill -9 test). The
// start-up GC must free it and leave the live pod's address alone.
func TestTornIPAMReservationIsReleased(t *testing.T) {
	e := StartEnv(t)
	ctx := harness.Context(t, 3*time.Minute)
	pod, _, err := e.RunContainer(ctx, "ipam")
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.P.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatal(err)
	}
	live := st.GetStatus().GetNetwork().GetIp()
	dir := e.Inside("/var/lib/cni/networks/podunit-test")
	torn := filepath.Join(dir, "10.214.255.250")
	if err := os.WriteFile(torn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.KillPodunit(); err != nil {
		t.Fatal(err)
	}
	e.Restart()
	if _, err := os.Stat(torn); !os.IsNotExist(err) {
		t.Fatalf("the torn reservation survived the restart (stat: %v)", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, live))
	if err != nil || !strings.HasPrefix(string(b), pod) {
		t.Fatalf("the live pod's reservation %s: %q, %v", live, b, err)
	}
	e.CheckInvariants(ctx, "after restart")
	if err := e.RemoveAllPods(ctx); err != nil {
		t.Fatal(err)
	}
	e.CheckInvariants(ctx, "after removal")
}
