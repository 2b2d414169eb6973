package logs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/podunit/podunit/errdefs"
)

func timeOf(p Position) time.Time { return time.UnixMicro(int64(p.Realtime)) }

const cursor1 = "s=84fe0be23176465a9ac90e0eb58be8a8;i=1f;b=fe361f626e9745468365f6d652ca3233;m=1c1554ef;t=6617ef9e22f79;x=27c8d48e91cc3ed2"

func TestParseCursor(t *testing.T) {
	p, err := ParseCursor(cursor1)
	if err != nil {
		t.Fatal(err)
	}
	want := Position{SeqnumID: "84fe0be23176465a9ac90e0eb58be8a8", Seqnum: 0x1f, Realtime: 0x6617ef9e22f79}
	if p != want {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	if p, err := ParseCursor(""); err != nil || !p.IsZero() {
		t.Fatalf("empty cursor: %+v, %v", p, err)
	}
	for _, bad := range []string{"garbage", "s=a;i=zz;t=1", "s=a;i=1", "i=1;t=2", "s=a;i=1;t=2;novalue"} {
		if _, err := ParseCursor(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseCursor(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestPositionAfter(t *testing.T) {
	a := Position{SeqnumID: "x", Seqnum: 5, Realtime: 100}
	b := Position{SeqnumID: "x", Seqnum: 6, Realtime: 90} // clock went back
	c := Position{SeqnumID: "y", Seqnum: 1, Realtime: 200}
	for _, tc := range []struct {
		p, q Position
		want bool
	}{
		{b, a, true}, {a, b, false}, {a, a, false},
		{c, a, true}, {a, c, false}, // other series: by the clock
		{a, Position{}, true}, {Position{}, Position{}, false}, {Position{}, a, false},
	} {
		if got := tc.p.After(tc.q); got != tc.want {
			t.Errorf("%+v.After(%+v) = %v", tc.p, tc.q, got)
		}
	}
}

// export builds journalctl -o export output; a field value that is not
// plain text is written in the binary form.
func export(entries ...[][2]string) []byte {
	var b bytes.Buffer
	for _, e := range entries {
		for _, kv := range e {
			if strings.ContainsAny(kv[1], "\n\x00") || !utf8.ValidString(kv[1]) {
				b.WriteString(kv[0] + "\n")
				var n [8]byte
				binary.LittleEndian.PutUint64(n[:], uint64(len(kv[1])))
				b.Write(n[:])
				b.WriteString(kv[1] + "\n")
			} else {
				b.WriteString(kv[0] + "=" + kv[1] + "\n")
			}
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

func TestExportDecoder(t *testing.T) {
	long := strings.Repeat("z", 300<<10) // longer than the read buffer
	data := export(
		[][2]string{{"__CURSOR", cursor1}, {"__REALTIME_TIMESTAMP", "1796047846387577"}, {"PRIORITY", "6"}, {"MESSAGE", "hello=world"}, {"CONTAINER_ID", "abc"}},
		[][2]string{{"__CURSOR", cursor1}, {"PRIORITY", "3"}, {"MESSAGE", "bin\xff\x00\nx"}, {"CONTAINER_ID", "abc"}, {"_LINE_BREAK", "line-max"}},
		[][2]string{{"__CURSOR", cursor1}, {"MESSAGE", long}, {"EMPTY", ""}, {"CONTAINER_ID", "abc"}},
	)
	d := NewExportDecoder(bytes.NewReader(data))
	f, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	e, err := EntryFromFields(f)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Message) != "hello=world" || e.Stream != Stdout || e.ContainerID != "abc" || !e.Complete() ||
		e.Time.UnixMicro() != 1796047846387577 || e.Pos.Seqnum != 0x1f || e.Cursor != cursor1 {
		t.Fatalf("entry 1: %+v", e)
	}
	f, err = d.Next()
	if err != nil {
		t.Fatal(err)
	}
	e, err = EntryFromFields(f)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Message) != "bin\xff\x00\nx" || e.Stream != Stderr || e.Complete() {
		t.Fatalf("entry 2: %+v", e)
	}
	if e.Time.UnixMicro() != 0x6617ef9e22f79 {
		t.Fatalf("time without __REALTIME_TIMESTAMP should come from the cursor: %v", e.Time)
	}
	f, err = d.Next()
	if err != nil {
		t.Fatal(err)
	}
	if string(f["MESSAGE"]) != long || string(f["EMPTY"]) != "" {
		t.Fatalf("entry 3: message %d bytes", len(f["MESSAGE"]))
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("end: %v, want io.EOF", err)
	}
}

func TestExportDecoderTruncated(t *testing.T) {
	data := export([][2]string{{"__CURSOR", cursor1}, {"MESSAGE", "bin\xffary"}, {"CONTAINER_ID", "a"}})
	for cut := 1; cut < len(data)-1; cut++ {
		d := NewExportDecoder(bytes.NewReader(data[:cut]))
		_, err := d.Next()
		if err == nil || err == io.EOF {
			t.Fatalf("cut at %d: %v, want an error", cut, err)
		}
	}
	var huge bytes.Buffer
	huge.WriteString("MESSAGE\n\xff\xff\xff\xff\xff\xff\xff\x7f")
	if _, err := NewExportDecoder(&huge).Next(); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("huge size: %v", err)
	}
	bad := []byte("MESSAGE\n\x02\x00\x00\x00\x00\x00\x00\x00abX\n\n")
	if _, err := NewExportDecoder(bytes.NewReader(bad)).Next(); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("unterminated binary field: %v", err)
	}
}

func TestEntryFromFieldsRejects(t *testing.T) {
	for name, f := range map[string]map[string][]byte{
		"no cursor":     {"CONTAINER_ID": []byte("a")},
		"bad cursor":    {"__CURSOR": []byte("x"), "CONTAINER_ID": []byte("a")},
		"no container":  {"__CURSOR": []byte(cursor1)},
		"bad priority":  {"__CURSOR": []byte(cursor1), "CONTAINER_ID": []byte("a"), "PRIORITY": []byte("x")},
		"bad timestamp": {"__CURSOR": []byte(cursor1), "CONTAINER_ID": []byte("a"), "__REALTIME_TIMESTAMP": []byte("-")},
	} {
		if _, err := EntryFromFields(f); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestEntryLineBreaks(t *testing.T) {
	for lb, complete := range map[string]bool{"": true, "eof": true, "nul": true, "line-max": false, "pid-change": false} {
		e := Entry{LineBreak: lb}
		if e.Complete() != complete {
			t.Errorf("_LINE_BREAK=%q: Complete() = %v", lb, e.Complete())
		}
	}
}

func TestStreamOfAndExtraFields(t *testing.T) {
	if StreamOf(PriorityStdout) != Stdout || StreamOf(PriorityStderr) != Stderr || StreamOf(0) != Stderr || StreamOf(7) != Stdout {
		t.Fatal("priority mapping")
	}
	got := strings.Join(ExtraFields(Identity{PodNamespace: "ns", PodName: "p", PodUID: "u", ContainerName: "c", ContainerID: "id", Attempt: 2}), " ")
	want := "PODUNIT_LOG=1 POD_NAMESPACE=ns POD_NAME=p POD_UID=u CONTAINER_NAME=c CONTAINER_ID=id CONTAINER_ATTEMPT=2"
	if got != want {
		t.Fatalf("got %s", got)
	}
}

func FuzzExportDecoder(f *testing.F) {
	f.Add(export([][2]string{{"__CURSOR", cursor1}, {"MESSAGE", "a"}, {"CONTAINER_ID", "x"}}))
	f.Add(export([][2]string{{"__CURSOR", cursor1}, {"MESSAGE", "\xff\n"}, {"CONTAINER_ID", "x"}}))
	f.Add([]byte("MESSAGE\n\x05\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewExportDecoder(bytes.NewReader(data))
		for i := 0; i < 1000; i++ {
			fields, err := d.Next()
			if err != nil {
				return
			}
			if e, err := EntryFromFields(fields); err == nil {
				AppendCRI(nil, e.Time, e.Stream, e.Message, e.Complete())
			}
		}
	})
}
