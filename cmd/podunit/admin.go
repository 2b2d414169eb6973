package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/podunit/podunit/gc"
	"golang.org/x/sys/unix"
)

// adminSocket is the root-only socket operator commands use for what the
// CRI has no call for (gc, reload).
func adminSocket(runDir string) string { return filepath.Join(runDir, "admin.sock") }

func serveAdmin(runDir string, runner *gc.Runner, rl *reloader, log *slog.Logger) (func(), error) {
	p := adminSocket(runDir)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	old := unix.Umask(0o177)
	lis, err := net.Listen("unix", p)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /gc", func(w http.ResponseWriter, r *http.Request) {
		res, err := runner.Run(r.Context(), r.URL.Query().Get("dry_run") == "true")
		if err != nil {
			log.Warn("gc on demand incomplete", "err", err)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	// Synchronous, unlike SIGHUP: `systemctl reload` (ExecReload=podunit
	// reload) returns once the reload is done and fails when it is refused.
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		res, _ := rl.reload(r.Context())
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(lis) }()
	return func() { srv.Close() }, nil
}
