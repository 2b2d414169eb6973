package logs

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// criLine is one parsed line of a CRI log file.
type criLine struct {
	Time   time.Time
	Stream Stream
	Tag    byte
	Text   string
}

// parseCRI parses a CRI log file the way the kubelet does, strictly: every
// line must have the four parts and end with a newline.
func parseCRI(data []byte) ([]criLine, error) {
	var out []criLine
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil, fmt.Errorf("unterminated line %q", data)
		}
		line := string(data[:i])
		data = data[i+1:]
		parts := strings.SplitN(line, " ", 4)
		if len(parts) != 4 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		ts, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil {
			return nil, fmt.Errorf("line %q: %v", line, err)
		}
		if parts[1] != "stdout" && parts[1] != "stderr" {
			return nil, fmt.Errorf("line %q: stream %q", line, parts[1])
		}
		if parts[2] != "F" && parts[2] != "P" {
			return nil, fmt.Errorf("line %q: tag %q", line, parts[2])
		}
		out = append(out, criLine{Time: ts, Stream: Stream(parts[1]), Tag: parts[2][0], Text: parts[3]})
	}
	return out, nil
}

// logical joins P parts to their F line per stream, as `kubectl logs`
// shows them; an unfinished line at the end is returned with a "…" mark.
func logical(lines []criLine) map[Stream][]string {
	out := map[Stream][]string{}
	cur := map[Stream]*strings.Builder{}
	for _, l := range lines {
		b := cur[l.Stream]
		if b == nil {
			b = &strings.Builder{}
			cur[l.Stream] = b
		}
		b.WriteString(l.Text)
		if l.Tag == 'F' {
			out[l.Stream] = append(out[l.Stream], b.String())
			b.Reset()
		}
	}
	for s, b := range cur {
		if b.Len() > 0 {
			out[s] = append(out[s], b.String()+"…")
		}
	}
	return out
}

func TestAppendCRI(t *testing.T) {
	ts := time.Date(2026, 11, 30, 14, 1, 2, 345678000, time.UTC)
	const stamp = "2026-11-30T14:01:02.345678Z"
	big := strings.Repeat("a", MaxLineSize)
	for _, tc := range []struct {
		name     string
		stream   Stream
		text     string
		complete bool
		want     string
	}{
		{"full line", Stdout, "hello world", true, stamp + " stdout F hello world\n"},
		{"stderr", Stderr, "oops", true, stamp + " stderr F oops\n"},
		{"partial", Stdout, "part", false, stamp + " stdout P part\n"},
		{"empty line", Stdout, "", true, stamp + " stdout F \n"},
		{"empty partial writes nothing", Stdout, "", false, ""},
		{"spaces kept", Stdout, "  a  b  ", true, stamp + " stdout F   a  b  \n"},
		{"carriage return kept", Stdout, "x\r", true, stamp + " stdout F x\r\n"},
		{"binary kept", Stdout, "\xff\xfe\x00\x01", true, stamp + " stdout F \xff\xfe\x00\x01\n"},
		{"exactly max", Stdout, big, true, stamp + " stdout F " + big + "\n"},
		{"max plus one", Stdout, big + "b", true, stamp + " stdout P " + big + "\n" + stamp + " stdout F b\n"},
		{"two pieces then partial", Stderr, big + big + "c", false,
			stamp + " stderr P " + big + "\n" + stamp + " stderr P " + big + "\n" + stamp + " stderr P c\n"},
		{"exactly two max, complete", Stdout, big + big, true, stamp + " stdout P " + big + "\n" + stamp + " stdout F " + big + "\n"},
		{"newline inside ends a line", Stdout, "a\nb", true, stamp + " stdout F a\n" + stamp + " stdout F b\n"},
		{"newline inside partial", Stdout, "a\nb", false, stamp + " stdout F a\n" + stamp + " stdout P b\n"},
		{"trailing newline is the line end", Stdout, "a\n", false, stamp + " stdout F a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendCRI(nil, ts, tc.stream, []byte(tc.text), tc.complete))
			if got != tc.want {
				t.Fatalf("got  %q\nwant %q", trunc(got), trunc(tc.want))
			}
			if _, err := parseCRI([]byte(got)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:100] + fmt.Sprintf("…(%d bytes)…", len(s)-200) + s[len(s)-100:]
	}
	return s
}

func TestAppendCRIRoundTrip(t *testing.T) {
	ts := time.Unix(1_800_000_000, 123).In(time.FixedZone("X", 3600))
	for _, n := range []int{0, 1, MaxLineSize - 1, MaxLineSize, MaxLineSize + 1, 3*MaxLineSize + 7, 100 << 10} {
		text := bytes.Repeat([]byte("0123456789"), n/10+1)[:n]
		out := AppendCRI([]byte("keep"), ts, Stderr, text, true)
		if !bytes.HasPrefix(out, []byte("keep")) {
			t.Fatal("dst prefix lost")
		}
		lines, err := parseCRI(out[4:])
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range lines {
			if len(l.Text) > MaxLineSize {
				t.Fatalf("n=%d: line %d has %d bytes", n, i, len(l.Text))
			}
			if !l.Time.Equal(ts) {
				t.Fatalf("time %v, want %v", l.Time, ts)
			}
		}
		got := logical(lines)[Stderr]
		if len(got) != 1 || got[0] != string(text) {
			t.Fatalf("n=%d: logical lines %d, first %d bytes", n, len(got), len(got[0]))
		}
	}
}
