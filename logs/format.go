package logs

import (
	"bytes"
	"time"
)

// MaxLineSize is the most text one CRI log line carries; longer lines are cut
// into partial (P) lines, as containerd and CRI-O do, so the kubelet's reader
// never needs an unbounded buffer.
const MaxLineSize = 16 * 1024

// CRI log tags: a full line ends the logical line, a partial one continues in
// the next line of the same stream.
const (
	tagFull    = 'F'
	tagPartial = 'P'
)

// AppendCRI appends the CRI log lines for text to dst, in the format the
// kubelet parses: `<RFC3339Nano> <stream> <F|P> <text>\n`. text is cut into
// MaxLineSize pieces tagged P; the last one is tagged F if complete (the
// logical line ends there) and P otherwise. An empty complete text is one
// line with empty text; an empty incomplete text appends nothing. Bytes are
// copied as they are, except that a newline inside text (stream lines never
// have one, other journal transports may) ends a full line, so the file
// stays parseable.
func AppendCRI(dst []byte, ts time.Time, stream Stream, text []byte, complete bool) []byte {
	if len(text) == 0 && !complete {
		return dst
	}
	var stamp [64]byte
	prefix := ts.AppendFormat(stamp[:0], time.RFC3339Nano)
	for {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			return appendPieces(dst, prefix, stream, text, complete)
		}
		dst = appendPieces(dst, prefix, stream, text[:i], true)
		text = text[i+1:]
		if len(text) == 0 {
			return dst
		}
	}
}

func appendPieces(dst, prefix []byte, stream Stream, text []byte, complete bool) []byte {
	for {
		n := len(text)
		last := n <= MaxLineSize
		if !last {
			n = MaxLineSize
		}
		tag := byte(tagPartial)
		if last && complete {
			tag = tagFull
		}
		dst = append(dst, prefix...)
		dst = append(dst, ' ')
		dst = append(dst, stream...)
		dst = append(dst, ' ', tag, ' ')
		dst = append(dst, text[:n]...)
		dst = append(dst, '\n')
		text = text[n:]
		if last {
			return dst
		}
	}
}
