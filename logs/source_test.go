package logs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podunit/podunit/errdefs"
)

// fakeJournalctl writes a script that records its arguments and prints out
// (then exits with code) in place of journalctl.
func fakeJournalctl(t *testing.T, out string, code int) (*Journalctl, string) {
	dir := t.TempDir()
	data := filepath.Join(dir, "out")
	if err := os.WriteFile(data, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	args := filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" >> " + args + "\ncat " + data + "\necho 'journalctl: boom' >&2\nexit " + string(rune('0'+code)) + "\n"
	path := filepath.Join(dir, "journalctl")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Journalctl{Path: path, Args: []string{"--directory", "/j"}}, args
}

func readArgs(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestJournalctlFollow(t *testing.T) {
	data := string(export(
		[][2]string{{"__CURSOR", cursor1}, {"PRIORITY", "3"}, {"MESSAGE", "one"}, {"CONTAINER_ID", "a"}},
		[][2]string{{"__CURSOR", "broken"}, {"MESSAGE", "skipped"}, {"CONTAINER_ID", "a"}},
		[][2]string{{"__CURSOR", cursor1}, {"MESSAGE", "two\xff"}, {"CONTAINER_ID", "b"}},
	))
	j, args := fakeJournalctl(t, data, 1)
	s, err := j.Follow(context.Background(), cursor1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	var last error
	for last == nil {
		var es []Entry
		es, last = s.Next()
		for _, e := range es {
			got = append(got, e.ContainerID+":"+string(e.Stream)+":"+string(e.Message))
		}
	}
	if strings.Join(got, ",") != "a:stderr:one,b:stdout:two\xff" {
		t.Fatalf("entries %q", got)
	}
	if !errors.Is(last, errdefs.ErrUnavailable) || !strings.Contains(last.Error(), "journalctl: boom") {
		t.Fatalf("end of stream: %v", last)
	}
	want := "--directory /j --follow --no-tail --quiet --output=export --output-fields=MESSAGE,PRIORITY,CONTAINER_ID,_LINE_BREAK --cursor=" + cursor1 + " PODUNIT_LOG=1 _TRANSPORT=stdout"
	if a := readArgs(t, args); a != want {
		t.Fatalf("args\n%s\nwant\n%s", a, want)
	}
}

func TestJournalctlTailAndLast(t *testing.T) {
	j, args := fakeJournalctl(t, "-- cursor: "+cursor1+"\n", 0)
	c, err := j.Tail(context.Background())
	if err != nil || c != cursor1 {
		t.Fatalf("Tail = %q, %v", c, err)
	}
	if a := readArgs(t, args); a != "--directory /j --quiet --lines=0 --show-cursor" {
		t.Fatalf("Tail args %s", a)
	}
	j, _ = fakeJournalctl(t, "", 0)
	if c, err := j.Tail(context.Background()); err != nil || c != "" {
		t.Fatalf("Tail of an empty journal = %q, %v", c, err)
	}

	j, args = fakeJournalctl(t, string(export([][2]string{{"__CURSOR", cursor1}, {"MESSAGE", "m"}, {"CONTAINER_ID", "c1"}})), 0)
	e, ok, err := j.Last(context.Background(), "c1")
	if err != nil || !ok || string(e.Message) != "m" || e.Pos.Seqnum != 0x1f {
		t.Fatalf("Last = %+v, %v, %v", e, ok, err)
	}
	if a := readArgs(t, args); !strings.HasSuffix(a, "PODUNIT_LOG=1 _TRANSPORT=stdout CONTAINER_ID=c1") || !strings.Contains(a, "--lines=1") {
		t.Fatalf("Last args %s", a)
	}
	j, _ = fakeJournalctl(t, "", 0)
	if _, ok, err := j.Last(context.Background(), "c1"); ok || err != nil {
		t.Fatalf("Last without entries: %v, %v", ok, err)
	}
	j, _ = fakeJournalctl(t, "", 1)
	if _, _, err := j.Last(context.Background(), "c1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Last failing: %v", err)
	}
}
