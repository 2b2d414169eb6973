package logrelay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/logs"
	"github.com/podunit/podunit/statefile"
)

type criLine struct {
	stream, tag, text string
}

// parseCRIFile reads a CRI log the way the kubelet does; every line must
// have a timestamp, a stream and a tag.
func parseCRIFile(t *testing.T, b []byte) []criLine {
	t.Helper()
	var out []criLine
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.Fatalf("CRI log does not end with a newline: %q", b)
		}
		f := strings.SplitN(string(b[:i]), " ", 4)
		b = b[i+1:]
		if len(f) != 4 || (f[2] != "F" && f[2] != "P") || (f[1] != "stdout" && f[1] != "stderr") {
			t.Fatalf("malformed CRI log line %q", strings.Join(f, " "))
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("timestamp %q: %v", f[0], err)
		}
		out = append(out, criLine{f[1], f[2], f[3]})
	}
	return out
}

// joined is what `kubectl logs` shows per stream: P pieces joined to the
// next F.
func joined(lines []criLine) map[string][]string {
	out := map[string][]string{}
	part := map[string]string{}
	for _, l := range lines {
		part[l.stream] += l.text
		if l.tag == "F" {
			out[l.stream] = append(out[l.stream], part[l.stream])
			part[l.stream] = ""
		}
	}
	for s, p := range part {
		if p != "" {
			out[s] = append(out[s], p+"<partial>")
		}
	}
	return out
}

func newTestLog(t *testing.T) (*logFile, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pod", "c", "0.log")
	f, err := openLogFile(path, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	lf := &logFile{path: path, uid: -1, gid: -1}
	if err := lf.use(f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.f.Close() })
	return lf, path
}

func TestCRIStreamSplitsLikeContainerd(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	exact := strings.Repeat("e", logs.MaxLineSize)
	cases := []struct {
		name   string
		chunks []string
		want   []string // "tag text", text cut to 20 bytes plus its length when longer
	}{
		{"lines", []string{"a\nb\n"}, []string{"F a", "F b"}},
		{"line across reads", []string{"ab", "c", "d\n"}, []string{"F abcd"}},
		{"crlf and empty", []string{"x\r\n\n\r\n y \n"}, []string{"F x", "F ", "F ", "F  y "}},
		{"cr inside stays", []string{"a\rb\n"}, []string{"F a\rb"}},
		{"binary", []string{"\xff\xfe\x00z\n"}, []string{"F \xff\xfe\x00z"}},
		{"long line", []string{long + "\n"}, []string{"P 16384", "P 16384", "F 8192"}},
		{"long line in small reads", splitEvery(long+"\n", 1000), []string{"P 16384", "P 16384", "F 8192"}},
		{"exactly max", []string{exact, "\n"}, []string{"F 16384"}},
		{"unterminated at eof", []string{"done\nno newline"}, []string{"F done", "P no newline"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lf, path := newTestLog(t)
			c := &criStream{stream: logs.Stdout, lf: lf}
			for _, ch := range tc.chunks {
				if err := c.take([]byte(ch), false, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.take(nil, true, time.Now()); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			var got []string
			for _, l := range parseCRIFile(t, b) {
				text := l.text
				if len(text) > 100 {
					text = fmt.Sprint(len(text))
				}
				got = append(got, l.tag+" "+text)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func splitEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// A relay killed after saving its record: the restarted relay writes what
// the record holds once, whether the kill came before the write, in the
// middle of it or after it.
func TestRepairFinishesTheInterruptedWrite(t *testing.T) {
	for _, written := range []string{"none", "half", "all"} {
		t.Run(written, func(t *testing.T) {
			lf, path := newTestLog(t)
			base := filepath.Join(t.TempDir(), "c.out.rec")
			rec, _, err := openRecorder(base)
			if err != nil {
				t.Fatal(err)
			}
			c := &criStream{stream: logs.Stdout, lf: lf, rec: rec}
			if err := c.take([]byte("first\nsec"), false, time.Now()); err != nil {
				t.Fatal(err)
			}
			// The next chunk: record saved, then the kill.
			before := lf.size
			b := logs.AppendCRI(nil, time.Now(), logs.Stdout, []byte("second"), true)
			if err := rec.save(lf.dev, lf.ino, lf.size, b, 3, 77); err != nil {
				t.Fatal(err)
			}
			switch written {
			case "half":
				lf.f.Write(b[:len(b)/2])
			case "all":
				lf.f.Write(b)
			}
			rec.close()
			lf.f.Close()

			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			lf2 := &logFile{path: path}
			if err := lf2.use(f); err != nil {
				t.Fatal(err)
			}
			rec2, last, err := openRecorder(base)
			if err != nil || last == nil || last.off != before || last.gen != 3 || last.consumed != 77 {
				t.Fatalf("record %+v, %v", last, err)
			}
			if err := lf2.repair([]*record{last}); err != nil {
				t.Fatal(err)
			}
			c2 := &criStream{stream: logs.Stdout, lf: lf2, rec: rec2}
			if err := c2.take([]byte("third\n"), true, time.Now()); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(path)
			if j := joined(parseCRIFile(t, got)); strings.Join(j["stdout"], ",") != "first,second,third" {
				t.Fatalf("after repair: %q", j)
			}
		})
	}
}

// A torn newer slot leaves the older record in force.
func TestRecorderSurvivesATornSlot(t *testing.T) {
	base := filepath.Join(t.TempDir(), "r")
	rec, _, err := openRecorder(base)
	if err != nil {
		t.Fatal(err)
	}
	rec.save(1, 2, 10, []byte("one"), 0, 5)
	rec.save(1, 2, 13, []byte("two"), 0, 9)
	rec.close()
	p := recordPaths(base)[0] // seq 2 went to slot 0
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-1], 0o600)
	_, last, err := openRecorder(base)
	if err != nil || last == nil || last.off != 10 || string(last.data) != "one" || last.consumed != 5 {
		t.Fatalf("after a torn slot: %+v %v", last, err)
	}
}

// The relay writes both streams to the CRI file, reopens it on request
// (the kubelet's rotation) and Flush returns once the last line is in.
func TestRelayWritesTheCRIFileAndReopens(t *testing.T) {
	_, sock, store := startServer(t)
	logPath := filepath.Join(t.TempDir(), "pods", "ns_p_uid", "app", "0.log")
	c := newContainerWithLog(t, sock, "l1", LogOptions{Path: logPath, UID: -1, GID: -1})
	if got := store.names(); !strings.Contains(strings.Join(got, ","), "lr.l1.log.f") {
		t.Fatalf("log file not in the fd store: %v", got)
	}
	cl := Client{Socket: sock}
	const n = 3000
	// The pipes stay open until the rotations are done: a container whose
	// output has ended is no longer the relay's, and REOPEN then answers
	// that it writes no file for it.
	rotationsDone := make(chan struct{})
	go func() {
		for i := 0; i < n; i++ {
			fmt.Fprintf(c.outW, "out %d\n", i)
			fmt.Fprintf(c.errW, "err %d\n", i)
		}
		<-rotationsDone
		c.outW.Close()
		c.errW.Close()
	}()
	var rotated []string
	defer func() {
		select {
		case <-rotationsDone:
		default:
			close(rotationsDone)
		}
	}()
	for i := 0; i < 3; i++ {
		time.Sleep(5 * time.Millisecond)
		r := fmt.Sprintf("%s.%d", logPath, i)
		if err := os.Rename(logPath, r); err != nil {
			t.Fatal(err)
		}
		if err := cl.Reopen("l1", logPath); err != nil {
			t.Fatal(err)
		}
		rotated = append(rotated, r)
	}
	close(rotationsDone)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go io.Copy(io.Discard, c.journOut)
	go io.Copy(io.Discard, c.journErr)
	if err := cl.Flush(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, p := range append(rotated, logPath) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	j := joined(parseCRIFile(t, all))
	for _, s := range []string{"stdout", "stderr"} {
		if len(j[s]) != n {
			t.Fatalf("%s: %d lines, want %d", s, len(j[s]), n)
		}
		for i, l := range j[s] {
			if want := fmt.Sprintf("%s %d", s[3:], i); l != want {
				t.Fatalf("%s line %d is %q, want %q", s, i, l, want)
			}
		}
	}
	if err := cl.Reopen("l1", ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("reopen of a finished container without a path: %v, want ErrNotFound", err)
	}
	// Its output ended while it runs on: the kubelet's rotation gets a
	// fresh file at the path, nothing writes to it.
	if err := os.Rename(logPath, logPath+".last"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Reopen("l1", logPath); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(logPath); err != nil || st.Size() != 0 {
		t.Fatalf("log path after reopen of an ended container: %v %v", st, err)
	}
	if got := store.names(); len(got) != 0 {
		t.Fatalf("fd store still holds %v", got)
	}
}

// journald that does not read: the container is not held up, and the CRI
// file gets every byte.
func TestStalledJournaldNeverHoldsTheCRIFile(t *testing.T) {
	_, sock, _ := startServer(t)
	logPath := filepath.Join(t.TempDir(), "0.log")
	c := newContainerWithLog(t, sock, "big", LogOptions{Path: logPath, UID: -1, GID: -1})
	line := strings.Repeat("y", 99) + "\n"
	const n = 100000 // 10 MB, more than the queue and the socket hold
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := io.Writer(c.outW)
		for i := 0; i < n; i++ {
			io.WriteString(w, line)
		}
		c.outW.Close()
		c.errW.Close()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the container blocked on a stalled journald")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := (Client{Socket: sock}).Flush(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(logPath)
	j := joined(parseCRIFile(t, b))
	if len(j["stdout"]) != n {
		t.Fatalf("%d lines in the CRI file, want %d", len(j["stdout"]), n)
	}
}

// newContainerWithLog is newContainer with a CRI log file.
func newContainerWithLog(t *testing.T, sock, id string, lo LogOptions) *container {
	t.Helper()
	var outP, errP [2]int
	if err := unix.Pipe2(outP[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Pipe2(errP[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	outS, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	errS, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := Register(sock, id, "", "", lo, outP[0], outS[0], errP[0], errS[0], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int{outP[0], outS[0], errP[0], errS[0]} {
		unix.Close(fd)
	}
	c := &container{
		outW: os.NewFile(uintptr(outP[1]), "out-w"), errW: os.NewFile(uintptr(errP[1]), "err-w"),
		journOut: os.NewFile(uintptr(outS[1]), "journal-out"), journErr: os.NewFile(uintptr(errS[1]), "journal-err"),
	}
	t.Cleanup(func() { c.outW.Close(); c.errW.Close(); c.journOut.Close(); c.journErr.Close() })
	return c
}

// What a restarted relay gets back: the pipe, the journald stream and the
// log file from the fd store, the metadata and records from the state
// dir. It finishes the write the kill cut and the saved partial line.
func TestRestoreRepairsAndResumesThePartialLine(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "0.log")
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := os.NewFile(uintptr(p[1]), "w")
	journal := os.NewFile(uintptr(sp[1]), "journal")
	defer journal.Close()
	go io.Copy(io.Discard, journal)

	// The killed relay's leftovers.
	s0 := New(Options{StateDir: dir})
	if err := statefile.Write(s0.metaFile("r2"), meta{LogPath: logPath, UID: -1, GID: -1}); err != nil {
		t.Fatal(err)
	}
	lf, err := openLogFile(logPath, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	lf.WriteString("2026-01-01T00:00:00Z stdout F before\n")
	st, _ := lf.Stat()
	var sst unix.Stat_t
	unix.Fstat(int(lf.Fd()), &sst)
	rec, _, err := openRecorder(s0.recordBase("r2", "out"))
	if err != nil {
		t.Fatal(err)
	}
	rec.save(sst.Dev, sst.Ino, st.Size(), []byte("2026-01-01T00:00:01Z stdout F cut by the kill\n"), 4, 2)
	rec.close()
	// The spool: "xx" done, "par" taken from the pipe, not written yet.
	if err := os.WriteFile(spoolPath(s0.spoolBase("r2", "out"), 4), []byte("xxpar"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(spoolPath(s0.spoolBase("r2", "out"), 3), []byte("stale"), 0o600)
	w.WriteString("tial\n")
	logFD, err := unix.Dup(int(lf.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	lf.Close()

	store := &fakeStore{stored: map[string]bool{}}
	s := New(Options{Socket: filepath.Join(dir, "s"), StateDir: dir, Store: store})
	s.Restore([]*os.File{os.NewFile(uintptr(p[0]), "lr.r2.out.p"), os.NewFile(uintptr(sp[0]), "lr.r2.out.s"), os.NewFile(uintptr(logFD), "lr.r2.log.f")})
	w.Close()
	if r := s.wait(context.Background(), "r2", 5*time.Second, 0, false); r != replyDone {
		t.Fatalf("wait: %s", r)
	}
	b, _ := os.ReadFile(logPath)
	if j := joined(parseCRIFile(t, b)); strings.Join(j["stdout"], ",") != "before,cut by the kill,partial" {
		t.Fatalf("CRI file after restore: %q", b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "r2.*")); len(left) != 0 {
		t.Errorf("records or spools left after the container ended: %v", left)
	}
}
