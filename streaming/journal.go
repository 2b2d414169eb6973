package streaming

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
)

// JournalFollower reads a non-TTY container's output from the journal,
// where the unit's ExecStart wrapper sends stdout (PRIORITY=6) and stderr
// (PRIORITY=3) as two streams: attach sees exactly what the logs get,
// and following needs nothing held by podunit, so it survives restarts.
// journalctl keeps podunit free of cgo (sdjournal needs libsystemd).
type JournalFollower struct {
	// Journalctl is the binary; empty means "journalctl" on PATH.
	Journalctl string
	// Args go before the matches (e.g. "-D", dir for a foreign journal).
	Args []string
}

func (j JournalFollower) bin() string {
	if j.Journalctl == "" {
		return "journalctl"
	}
	return j.Journalctl
}

func journalMatch(t Target) []string {
	if len(t.JournalMatch) > 0 {
		return t.JournalMatch
	}
	return []string{"CONTAINER_ID=" + t.ID}
}

// FollowArgv is journalctl's command line: everything after cursor (or,
// with no cursor, everything: the container has logged nothing yet).
func FollowArgv(match []string, cursor string) []string {
	argv := []string{"--follow", "--quiet", "--output=json", "--no-pager", "--lines=all"}
	if cursor != "" {
		argv = append(argv, "--after-cursor="+cursor)
	}
	return append(argv, match...)
}

func (j JournalFollower) Follow(ctx context.Context, t Target, stdout, stderr io.Writer) (func() error, error) {
	match := append(append([]string{}, j.Args...), journalMatch(t)...)
	// The position is fixed before Follow returns, so nothing the
	// container writes in answer to attach input can be missed.
	last, err := exec.CommandContext(ctx, j.bin(), append([]string{"--quiet", "--output=json", "--no-pager", "--lines=1"}, match...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("journalctl: %w", err)
	}
	var cursor string
	if lines := bytes.Split(bytes.TrimSpace(last), []byte("\n")); bytes.HasPrefix(lines[len(lines)-1], []byte("{")) {
		var e struct {
			Cursor string `json:"__CURSOR"`
		}
		if err := json.Unmarshal(lines[len(lines)-1], &e); err != nil {
			return nil, fmt.Errorf("journalctl: parse entry: %w", err)
		}
		cursor = e.Cursor
	}
	cmd := exec.CommandContext(ctx, j.bin(), FollowArgv(match, cursor)...)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("journalctl: %w", err)
	}
	return func() error {
		err := copyJournal(pipe, stdout, stderr)
		cmd.Wait()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}, nil
}

// copyJournal writes journalctl JSON entries to stdout or stderr by
// priority, restoring the newline journald split each line on.
func copyJournal(r io.Reader, stdout, stderr io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		msg, isErr, ok := parseEntry(sc.Bytes())
		if !ok {
			continue
		}
		w := stdout
		if isErr {
			w = stderr
		}
		if _, err := w.Write(msg); err != nil {
			return err
		}
	}
	return sc.Err()
}

// parseEntry decodes one journalctl --output=json line. MESSAGE is a
// string, or an array of bytes when it is not valid UTF-8.
func parseEntry(line []byte) (msg []byte, isErr, ok bool) {
	var e struct {
		Message   json.RawMessage `json:"MESSAGE"`
		Priority  string          `json:"PRIORITY"`
		LineBreak string          `json:"_LINE_BREAK"`
	}
	if err := json.Unmarshal(line, &e); err != nil || len(e.Message) == 0 || string(e.Message) == "null" {
		return nil, false, false
	}
	var s string
	if err := json.Unmarshal(e.Message, &s); err == nil {
		msg = []byte(s)
	} else {
		var bs []int
		if err := json.Unmarshal(e.Message, &bs); err != nil {
			return nil, false, false
		}
		msg = make([]byte, len(bs))
		for i, b := range bs {
			msg[i] = byte(b)
		}
	}
	// _LINE_BREAK is only present when the line did not end in "\n"
	// (line-max, eof, pid-change, nul).
	if e.LineBreak == "" {
		msg = append(msg, '\n')
	}
	return msg, e.Priority == "3", true
}
