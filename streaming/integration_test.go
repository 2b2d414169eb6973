//go:build integration

package streaming

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
)

// JournalFollower against a real journald: only output written after
// Follow returns, split by priority like the unit wrapper's two streams.
func TestJournalFollower(t *testing.T) {
	h := harness.Start(t, harness.Options{})
	id := "jf1"
	h.MustExec("systemd-run", "--unit=jftest", "-p", "LogExtraFields=CONTAINER_ID="+id,
		"sh", "-c", "echo before; sleep 3; echo after; echo '<3>err-after'; exec sleep 600")
	t.Cleanup(func() { h.Exec("systemctl", "stop", "jftest.service") })
	// The container's own line, by its field: the unit's journal (-u) also
	// has systemd's "Started … echo before …", which a loaded machine logs
	// well before the shell runs, and Follow would then find no entry to
	// start after.
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, _ := exec.Command("journalctl", "-D", h.JournalDir(), "--no-pager", "-o", "cat", "CONTAINER_ID="+id).Output()
		if strings.Contains(string(j), "before\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output in the journal:\n%s", j)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errb := &syncBuffer{}, &syncBuffer{}
	wait, err := JournalFollower{Args: []string{"-D", h.JournalDir()}}.Follow(ctx, Target{ID: id}, out, errb)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- wait() }()
	for out.String() != "after\n" || errb.String() != "err-after\n" {
		if ctx.Err() != nil {
			t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done

	// A container that has not written anything yet: no cursor.
	h.MustExec("systemd-run", "--unit=jftest2", "-p", "LogExtraFields=CONTAINER_ID=jf2",
		"sh", "-c", "sleep 2; echo first; exec sleep 600")
	t.Cleanup(func() { h.Exec("systemctl", "stop", "jftest2.service") })
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	out2 := &syncBuffer{}
	wait, err = JournalFollower{Args: []string{"-D", h.JournalDir()}}.Follow(ctx2, Target{ID: "jf2"}, out2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	go wait()
	for out2.String() != "first\n" {
		if ctx2.Err() != nil {
			t.Fatalf("stdout %q", out2.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
