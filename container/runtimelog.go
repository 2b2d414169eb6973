package container

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
)

// lastRuntimeError returns the message of the last error the runtime
// logged (runc and crun write JSON lines with --log-format=json), or the
// last non-empty line of a plain log.
func lastRuntimeError(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var last, lastErr string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg != "" {
			last = e.Msg
			if e.Level == "error" || e.Level == "fatal" {
				lastErr = e.Msg
			}
			continue
		}
		last = line
	}
	if lastErr != "" {
		return lastErr
	}
	return last
}
