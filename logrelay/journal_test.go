package logrelay

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// journalPair is a journald stream stand-in: the sink's end (non-blocking,
// as the relay's descriptors are) and the end a test reads as journald.
func journalPair(t *testing.T) (sink, journald *os.File) {
	t.Helper()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(sp[0], true); err != nil {
		t.Fatal(err)
	}
	sink, journald = os.NewFile(uintptr(sp[0]), "sink"), os.NewFile(uintptr(sp[1]), "journald")
	t.Cleanup(func() { sink.Close(); journald.Close() })
	return sink, journald
}

// An idle stream's journal queue costs next to nothing: with a channel of
// 4096 slots it was 96 KiB per stream, most of the relay's memory per
// running container.
func TestJournalSinkIdleIsSmall(t *testing.T) {
	const n = 50
	sinks := make([]*journalSink, 0, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		s, _ := journalPair(t)
		sinks = append(sinks, newJournalSink(s, &anchor{}))
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 8<<10 {
		t.Errorf("an idle journal sink allocated %d bytes, want at most 8 KiB", per)
	}
	for _, s := range sinks {
		if !s.close(time.Second) {
			t.Fatal("an idle sink did not close")
		}
	}
}

// A journald that does not read: what exceeds the queue's bound is dropped
// and counted, whole chunks only; what was queued arrives in order once it
// reads again, coalesced or not.
func TestJournalSinkBoundsAndOrder(t *testing.T) {
	sinkEnd, journald := journalPair(t)
	j := newJournalSink(sinkEnd, &anchor{})
	const chunk, chunks = 1 << 10, 8192 // 8 MiB against a 4 MiB queue
	for i := range chunks {
		j.push(bytes.Repeat([]byte{byte(i % 251)}, chunk))
	}
	dropped := j.dropped.Load()
	if dropped == 0 || dropped%chunk != 0 {
		t.Fatalf("dropped %d bytes, want whole chunks beyond the 4 MiB queue", dropped)
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(journald)
		got <- b
	}()
	if !j.close(10 * time.Second) {
		t.Fatal("the queue did not drain")
	}
	if j.err != nil {
		t.Fatal(j.err)
	}
	sinkEnd.Close()
	b := <-got
	if want := int64(chunks*chunk) - dropped; int64(len(b)) != want {
		t.Fatalf("journald got %d bytes, want %d (pushed minus dropped)", len(b), want)
	}
	// Kept chunks are a prefix of the pushed ones: nothing reordered, and
	// nothing kept after the first drop.
	for i := 0; i < len(b); i += chunk {
		if want := byte((i / chunk) % 251); !bytes.Equal(b[i:i+chunk], bytes.Repeat([]byte{want}, chunk)) {
			t.Fatalf("chunk %d out of order", i/chunk)
		}
	}
}
