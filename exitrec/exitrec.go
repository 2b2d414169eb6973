// Package exitrec is the ExecStopPost= helper of a container unit
// (`podunit _exitrec`). systemd runs it after the container's init is gone,
// whether or not podunit is running, with the main process's fate in
// $SERVICE_RESULT, $EXIT_CODE and $EXIT_STATUS. It records that, plus OOM
// kills read from the unit's cgroup before systemd removes it, durably in
// the container's state directory, then deletes the runtime's state.
package exitrec

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/podunit/podunit/logrelay"
	"github.com/podunit/podunit/mountns"
	"github.com/podunit/podunit/statefile"
	"github.com/podunit/podunit/stdio"
	"golang.org/x/sys/unix"
)

// FileName is the record's name inside the container's state directory.
const FileName = "exit.json"

// Record is what systemd told about the container's end.
type Record struct {
	// ServiceResult is $SERVICE_RESULT: success, exit-code, signal,
	// core-dump, oom-kill, timeout, protocol, resources, ...
	ServiceResult string `json:"service_result"`
	// ExitCode is $EXIT_CODE: exited, killed, dumped (empty if the main
	// process never ran).
	ExitCode string `json:"exit_code,omitempty"`
	// ExitStatus is $EXIT_STATUS: a number for exited, a signal name
	// ("TERM", "KILL") otherwise.
	ExitStatus string `json:"exit_status,omitempty"`
	// FinishedAt is when the record was made, in Unix nanoseconds.
	FinishedAt int64 `json:"finished_at"`
	// OOMKilled is true when the kernel OOM-killed a process of the
	// container (systemd's oom-kill result exists only on cgroup v2).
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// Status returns the container's exit status as the CRI reports it: the
// exit code, or 128+signal for a killed process (what a shell shows).
func (r *Record) Status() int32 {
	switch r.ExitCode {
	case "exited":
		n, err := strconv.Atoi(r.ExitStatus)
		if err != nil {
			return 255
		}
		return int32(n)
	case "killed", "dumped":
		if n, err := strconv.Atoi(r.ExitStatus); err == nil {
			return int32(128 + n)
		}
		if sig := unix.SignalNum("SIG" + r.ExitStatus); sig != 0 {
			return int32(128 + int(sig))
		}
		return 137
	}
	// The main process never ran (the runtime failed before it): the CRI
	// convention for "could not start" is 128 (containerd does the same).
	return 128
}

// Read returns the record in dir; errdefs.ErrNotFound if none was written.
func Read(dir string) (*Record, error) {
	var r Record
	if err := statefile.Read(filepath.Join(dir, FileName), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Write stores r in dir atomically and durably.
func Write(dir string, r *Record) error {
	return statefile.Write(filepath.Join(dir, FileName), r)
}

// Options are the helper's flags.
type Options struct {
	Dir string
	// CgroupPath is the unit's cgroup ("/a.slice/a-b.slice/x.service").
	CgroupPath string
	// CgroupRoot is where the hierarchies are mounted.
	CgroupRoot string
	// RelayPIDFile names the log relay (package stdio); the recorder waits
	// for it to drain the container's last output before writing the
	// record, since podunit completes the CRI log once it sees the record
	// (and systemd SIGKILLs what is left in the unit after ExecStopPost).
	RelayPIDFile string
	// RelaySocket and RelayID name the container at the node's log relay
	// (package logrelay), which the recorder waits for in the same way.
	RelaySocket string
	RelayID     string
	// MountNS is the pin of podunit's mount namespace, where Argv runs
	// (the runtime's view of its containers is there); the recorder itself
	// runs where systemd started it.
	MountNS string
	// Argv, when set, runs after the record is written: the runtime's
	// `delete --force`, so no stopped container state lingers in its root.
	Argv []string
}

// ParseArgs parses `[--cgroup PATH] [--cgroup-root DIR] DIR [-- ARGV...]`.
func ParseArgs(args []string) (Options, error) {
	fs := flag.NewFlagSet("_exitrec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o Options
	fs.StringVar(&o.CgroupPath, "cgroup", "", "the unit's cgroup path, for OOM counters")
	fs.StringVar(&o.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup mount point")
	fs.StringVar(&o.RelayPIDFile, "relay-pid-file", "", "wait for this log relay to exit")
	fs.StringVar(&o.RelaySocket, "relay-socket", "", "the node's log relay")
	fs.StringVar(&o.RelayID, "relay-id", "", "the container's id at the log relay")
	fs.StringVar(&o.MountNS, "mount-ns", "", "run COMMAND in the mount namespace pinned here")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "--" {
		return o, errors.New("usage: _exitrec [--cgroup PATH] DIR [-- COMMAND...]")
	}
	o.Dir = rest[0]
	rest = rest[1:]
	if len(rest) > 0 {
		if rest[0] != "--" || len(rest) == 1 {
			return o, fmt.Errorf("unexpected arguments %q", rest)
		}
		o.Argv = rest[1:]
	}
	return o, nil
}

// FromEnv builds a record from systemd's ExecStopPost environment.
func FromEnv(getenv func(string) string, now time.Time) *Record {
	return &Record{
		ServiceResult: getenv("SERVICE_RESULT"),
		ExitCode:      getenv("EXIT_CODE"),
		ExitStatus:    getenv("EXIT_STATUS"),
		FinishedAt:    now.UnixNano(),
		OOMKilled:     getenv("SERVICE_RESULT") == "oom-kill",
	}
}

// OOMKills returns how many processes the kernel OOM-killed in the unit's
// cgroup and the container's cgroup below it. On v2 memory.events counts
// hierarchically; on v1 the counter is per cgroup and the victim sits in
// the runtime's sub-cgroup, so both are read.
func OOMKills(root, unitPath string) int {
	if unitPath == "" {
		return 0
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return counter(filepath.Join(root, unitPath, "memory.events"), "oom_kill")
	}
	total := 0
	for _, p := range []string{unitPath, filepath.Join(unitPath, "container")} {
		total += counter(filepath.Join(root, "memory", p, "memory.oom_control"), "oom_kill")
	}
	return total
}

func counter(file, key string) int {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// warn reports a problem through journald's native protocol: the unit's
// stdout/stderr streams carry the container's log, and anything printed
// there would show up in the CRI log as container output.
func warn(format string, args ...any) {
	msg := "podunit _exitrec: " + fmt.Sprintf(format, args...)
	if journal.Enabled() {
		if err := journal.Send(msg, journal.PriWarning, map[string]string{"SYSLOG_IDENTIFIER": "podunit-exitrec"}); err == nil {
			return
		}
	}
	fmt.Fprintln(os.Stderr, msg)
}

// Main is `podunit _exitrec`.
func Main(args []string) int {
	o, err := ParseArgs(args)
	if err != nil {
		warn("%v", err)
		return 2
	}
	rec := FromEnv(os.Getenv, time.Now())
	if OOMKills(o.CgroupRoot, o.CgroupPath) > 0 {
		rec.OOMKilled = true
	}
	// The record tells podunit the container is done, and podunit then
	// completes its CRI log from the journal: the relays must have handed
	// the last output to journald first.
	// Whatever of the container still runs holds its output pipes open.
	if n := KillRest(o.CgroupRoot, o.CgroupPath, 5*time.Second); n > 0 {
		warn("killed %d process(es) left in the unit after the container's main process ended", n)
	}
	if o.RelaySocket != "" && o.RelayID != "" {
		// The relay is outside the unit, so nothing stops it from
		// finishing: the wait only ends early on a stuck journald.
		if err := logrelay.Wait(o.RelaySocket, o.RelayID, 10*time.Second); err != nil && !errors.Is(err, logrelay.ErrUnknown) {
			warn("%v; the container's last output may be cut", err)
		}
	}
	if o.RelayPIDFile != "" && !stdio.WaitRelay(o.RelayPIDFile, 3*time.Second) {
		warn("log relay %s still running; the container's last output may be cut", o.RelayPIDFile)
	}
	rc := 0
	if err := Write(o.Dir, rec); err != nil {
		warn("%v", err)
		rc = 1
	}
	if len(o.Argv) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out []byte
		err := mountns.OnThread(o.MountNS, func() error {
			var err error
			out, err = exec.CommandContext(ctx, o.Argv[0], o.Argv[1:]...).CombinedOutput()
			return err
		})
		if err != nil {
			// podunit deletes again on remove; the record is what matters.
			warn("%s: %v: %s", strings.Join(o.Argv, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return rc
}
