//go:build integration

package container

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// counterScript keeps its state in the shell's memory only: a restore
// that continues the count restored the process, not a fresh start.
const counterScript = `i=0; while true; do i=$((i+1)); echo $i; sleep 0.2; done`

// criuUnusable says why CRIU cannot work here ("" when `criu check`
// passes): the reason a checkpoint test skips is CRIU's own words.
func criuUnusable() string {
	out, err := exec.Command("criu", "check").CombinedOutput()
	if err == nil {
		return ""
	}
	var errs []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "Error") {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) == 0 {
		errs = []string{strings.TrimSpace(string(out)), err.Error()}
	}
	return strings.Join(errs, "; ")
}

// lastCount is the last number the counter wrote to its CRI log.
func lastCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("CRI log line %q", lines[len(lines)-1])
	}
	return n
}

// checkpointRestore: a counter is checkpointed (and keeps counting),
// removed, and restored from the archive into a new container whose
// count goes on from the checkpoint's, in its own CRI log.
func (ie *inside) checkpointRestore(ctx context.Context, t *testing.T) {
	if why := criuUnusable(); why != "" {
		// On the dev/CI hosts (kernel 6.13+) Debian 12's criu 3.17 cannot
		// parse the vDSO: the kernel split [vvar] into [vvar] and
		// [vvar_vclock], fixed in criu 4.0. The VM tier (Debian's 6.1
		// kernel) runs the same scenario over CRI: test/vm
		// TestNodeCheckpointRestore.
		ie.checkpointFails(ctx, t)
		t.Skipf("restore not run: criu check fails in this kernel, not in podunit: %s", why)
	}
	m := ie.manager(t)
	id := ie.run(ctx, t, m, shConfig("counter", counterScript))
	time.Sleep(2 * time.Second)
	loc := filepath.Join(itestDir, "counter.tar")
	defer os.Remove(loc)
	if err := m.Checkpoint(ctx, id, loc, time.Minute); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	at := lastCount(t, filepath.Join(ie.logDir, "counter.log"))
	if st, _, err := m.Status(ctx, id, false); err != nil || st.State.String() != "CONTAINER_RUNNING" {
		t.Fatalf("after checkpoint: %v %v", st.GetState(), err)
	}
	if err := m.Stop(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	cfg := shConfig("counter", "")
	cfg.Image.Image = loc
	cfg.LogPath = "counter-restored.log"
	rid, err := m.Create(ctx, "pod-counter", cfg, nil)
	if err != nil {
		t.Fatalf("create from checkpoint: %v", err)
	}
	if err := m.Start(ctx, rid); err != nil {
		t.Fatalf("restore: %v", err)
	}
	time.Sleep(2 * time.Second)
	b, err := os.ReadFile(filepath.Join(ie.logDir, "counter-restored.log"))
	if err != nil {
		t.Fatal(err)
	}
	first := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	n, _ := strconv.Atoi(first[len(first)-1])
	// The first count after the restore follows the last one before the
	// checkpoint (give or take what ran between dump and log read).
	if n <= 1 || n > at+2 {
		t.Fatalf("restored counter starts at %d, checkpoint was at %d:\n%s", n, at, b)
	}
	if err := m.Stop(ctx, rid, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, rid); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}

// checkpointFails: where CRIU cannot dump, CheckpointContainer says why in
// CRIU's words, writes no archive, leaves no work directory and the
// container runs on.
func (ie *inside) checkpointFails(ctx context.Context, t *testing.T) {
	m := ie.manager(t)
	id := ie.run(ctx, t, m, shConfig("counter", counterScript))
	loc := filepath.Join(itestDir, "counter.tar")
	err := m.Checkpoint(ctx, id, loc, time.Minute)
	t.Logf("checkpoint error: %v", err)
	if err == nil || !strings.Contains(err.Error(), "criu") {
		t.Errorf("checkpoint where criu cannot work: %v", err)
	}
	if _, serr := os.Stat(loc); !os.IsNotExist(serr) {
		t.Errorf("archive written after a failed checkpoint: %v", serr)
		os.Remove(loc)
	}
	if left, _ := filepath.Glob(filepath.Join(ie.opts.StateDir, id, "checkpoint-*")); len(left) != 0 {
		t.Errorf("work directories left: %v", left)
	}
	if st, _, err := m.Status(ctx, id, false); err != nil || st.State.String() != "CONTAINER_RUNNING" {
		t.Errorf("after a failed checkpoint: %v %v", st.GetState(), err)
	}
	if err := m.Stop(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	ie.assertNoLeaks(ctx, t)
}
