package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

func init() {
	register("reload", command{summary: "make the running daemon re-read its configuration (ExecReload=)", run: runReload})
}

// runReload asks the daemon to reload over its admin socket and waits for
// the outcome, so that `systemctl reload` returns once the reload is done
// and fails when it was refused; a bare SIGHUP (`kill -HUP`) returns at once.
// With --pid it falls back to SIGHUP when the admin socket cannot be
// reached.
func runReload(args []string) int {
	fs, cf := newCLIFlags("reload", "reload [--pid PID]")
	pid := fs.Int("pid", 0, "the daemon's PID ($MAINPID): sent SIGHUP when its admin socket cannot be reached")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	c, err := cf.read()
	if err != nil {
		// The daemon would refuse the same files; it keeps running as is.
		return fail("%v; not reloaded, podunit keeps its running configuration", err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", adminSocket(c.Paths.RunDir))
	}}, Timeout: 2 * time.Minute}
	resp, err := hc.Post("http://podunit/reload", "application/json", nil)
	if err != nil {
		if *pid > 0 {
			if kerr := syscall.Kill(*pid, syscall.SIGHUP); kerr != nil {
				return fail("reach the podunit daemon's admin socket: %v; SIGHUP to %d: %v", err, *pid, kerr)
			}
			fmt.Fprintf(os.Stderr, "podunit: admin socket unreachable (%v): sent SIGHUP to %d, see its log for the outcome\n", err, *pid)
			return 0
		}
		return fail("reach the podunit daemon's admin socket: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fail("reload: %s", strings.TrimSpace(string(body)))
	}
	var res reloadResult
	if err := json.Unmarshal(body, &res); err != nil {
		return fail("reload: bad answer: %v", err)
	}
	if res.Error != "" {
		return fail("reload refused, podunit keeps its running configuration: %s", res.Error)
	}
	fmt.Printf("reloaded; applied: %s; changed but kept until a restart: %s\n", keyList(res.Applied), keyList(res.Kept))
	return 0
}

func keyList(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}
