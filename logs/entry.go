package logs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/podunit/podunit/errdefs"
)

// Entry is one journal entry of a container's output.
type Entry struct {
	// Cursor is journald's opaque position of the entry; Pos is what
	// podunit compares.
	Cursor string
	Pos    Position
	// Time is when journald received the line.
	Time        time.Time
	ContainerID string
	Stream      Stream
	Message     []byte
	// LineBreak is journald's _LINE_BREAK: empty when the line ended with
	// a newline, "line-max" when journald cut a long line (more follows),
	// "nul" for a NUL byte, "eof" for the stream's last unterminated line,
	// "pid-change" when the writing process changed mid-line.
	LineBreak string
}

// Complete reports whether the entry ends a logical line. A line cut by
// journald's LineMax or by a change of writer continues in the stream's
// next entry; journald treats a NUL byte as a line end, and so does podunit
// (the NUL itself is not stored).
func (e *Entry) Complete() bool {
	return e.LineBreak != "line-max" && e.LineBreak != "pid-change"
}

// Position is the comparable part of a journal cursor. Within one sequence
// number series (SeqnumID) entries are totally ordered by Seqnum; across
// series (journal files started afresh) only the wall clock orders them.
type Position struct {
	SeqnumID string `json:"seqnum_id,omitempty"`
	Seqnum   uint64 `json:"seqnum,omitempty"`
	// Realtime is in microseconds since the epoch.
	Realtime uint64 `json:"realtime,omitempty"`
}

// IsZero reports whether p is "before every entry".
func (p Position) IsZero() bool { return p.SeqnumID == "" && p.Seqnum == 0 && p.Realtime == 0 }

// After reports whether p is strictly after q. Every entry is after the
// zero position.
func (p Position) After(q Position) bool {
	if q.IsZero() {
		return !p.IsZero()
	}
	if p.SeqnumID == q.SeqnumID {
		return p.Seqnum > q.Seqnum
	}
	return p.Realtime > q.Realtime
}

// ParseCursor extracts the position from a journal cursor
// (s=<seqnum id>;i=<seqnum hex>;b=<boot id>;m=<monotonic hex>;t=<realtime hex>;x=<hash>).
// The empty cursor is the zero position.
func ParseCursor(c string) (Position, error) {
	var p Position
	if c == "" {
		return p, nil
	}
	var haveS, haveI, haveT bool
	for _, kv := range strings.Split(c, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Position{}, fmt.Errorf("journal cursor %q: %w", c, errdefs.ErrInvalid)
		}
		var err error
		switch k {
		case "s":
			p.SeqnumID, haveS = v, v != ""
		case "i":
			p.Seqnum, err = strconv.ParseUint(v, 16, 64)
			haveI = err == nil
		case "t":
			p.Realtime, err = strconv.ParseUint(v, 16, 64)
			haveT = err == nil
		}
		if err != nil {
			return Position{}, fmt.Errorf("journal cursor %q: %s: %w", c, k, errdefs.ErrInvalid)
		}
	}
	if !haveS || !haveI || !haveT {
		return Position{}, fmt.Errorf("journal cursor %q: missing s, i or t: %w", c, errdefs.ErrInvalid)
	}
	return p, nil
}

// maxFieldSize bounds one binary field of the export format; journald's own
// limit for a field is far below (DATA_SIZE_MAX is 64 MiB on 64-bit), so a
// larger size means a corrupted stream, not a big line.
const maxFieldSize = 64 << 20

// ExportDecoder reads journalctl's export format (`-o export`): entries are
// separated by an empty line; a field is `NAME=value\n`, or, when the value
// is not printable text, `NAME\n` followed by a little-endian 64-bit size,
// the raw bytes and `\n`. Unlike the JSON output it carries every value in
// full and byte for byte, without a size threshold.
type ExportDecoder struct {
	r *bufio.Reader
}

// NewExportDecoder reads entries from r.
func NewExportDecoder(r io.Reader) *ExportDecoder {
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < 256<<10 {
		br = bufio.NewReaderSize(r, 256<<10)
	}
	return &ExportDecoder{r: br}
}

// Buffered reports how many bytes are read ahead: 0 means the next Next
// may block on the writer.
func (d *ExportDecoder) Buffered() int { return d.r.Buffered() }

// Next returns the next entry: its fields as a map of name to raw value.
// io.EOF means the stream ended cleanly between entries.
func (d *ExportDecoder) Next() (map[string][]byte, error) {
	fields := map[string][]byte{}
	for {
		line, err := d.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// a text field longer than the buffer: collect it whole
			head := append([]byte(nil), line...)
			var rest []byte
			rest, err = d.r.ReadBytes('\n')
			line = append(head, rest...)
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(line) == 0 && len(fields) == 0 {
				return nil, io.EOF
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("journal export stream: %w", err)
		}
		line = line[:len(line)-1]
		if len(line) == 0 {
			if len(fields) == 0 {
				continue
			}
			return fields, nil
		}
		if i := bytes.IndexByte(line, '='); i >= 0 {
			fields[string(line[:i])] = append([]byte(nil), line[i+1:]...)
			continue
		}
		name := string(line)
		var size [8]byte
		if _, err := io.ReadFull(d.r, size[:]); err != nil {
			return nil, fmt.Errorf("journal export stream: field %s size: %w", name, unexpected(err))
		}
		n := binary.LittleEndian.Uint64(size[:])
		if n > maxFieldSize {
			return nil, fmt.Errorf("journal export stream: field %s of %d bytes: %w", name, n, errdefs.ErrInvalid)
		}
		val := make([]byte, n+1)
		if _, err := io.ReadFull(d.r, val); err != nil {
			return nil, fmt.Errorf("journal export stream: field %s: %w", name, unexpected(err))
		}
		if val[n] != '\n' {
			return nil, fmt.Errorf("journal export stream: field %s not terminated: %w", name, errdefs.ErrInvalid)
		}
		fields[name] = val[:n]
	}
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// EntryFromFields builds an Entry from an exported journal entry. It fails
// on entries that lack a cursor or a container id, or have a malformed
// cursor, timestamp or priority.
func EntryFromFields(f map[string][]byte) (Entry, error) {
	e := Entry{
		Cursor:      string(f[fieldCursor]),
		ContainerID: string(f[FieldContainerID]),
		Message:     f[fieldMessage],
		LineBreak:   string(f[fieldLineBreak]),
	}
	if e.Cursor == "" {
		return Entry{}, fmt.Errorf("journal entry without %s: %w", fieldCursor, errdefs.ErrInvalid)
	}
	pos, err := ParseCursor(e.Cursor)
	if err != nil {
		return Entry{}, err
	}
	e.Pos = pos
	if e.ContainerID == "" {
		return Entry{}, fmt.Errorf("journal entry %s without %s: %w", e.Cursor, FieldContainerID, errdefs.ErrInvalid)
	}
	us := pos.Realtime
	if v, ok := f[fieldRealtime]; ok {
		us, err = strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return Entry{}, fmt.Errorf("journal entry %s: %s %q: %w", e.Cursor, fieldRealtime, v, errdefs.ErrInvalid)
		}
	}
	e.Time = time.UnixMicro(int64(us))
	prio := PriorityStdout
	if v, ok := f[fieldPriority]; ok {
		prio, err = strconv.Atoi(string(v))
		if err != nil {
			return Entry{}, fmt.Errorf("journal entry %s: %s %q: %w", e.Cursor, fieldPriority, v, errdefs.ErrInvalid)
		}
	}
	e.Stream = StreamOf(prio)
	return e, nil
}
