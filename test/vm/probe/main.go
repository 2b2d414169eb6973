// Command probe runs inside the cgroup v2 test VM: it is the workload of
// the VM suite's units (burn CPU, hold memory) and reads podunit's stats
// from inside, where the guest's cgroup files are.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/podunit/podunit/stats"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: probe burn DURATION MARKER | alloc MIB MARKER | stats CGROUP | oom CGROUP OUTFILE")
		os.Exit(2)
	}
	arg := os.Args[2]
	switch os.Args[1] {
	case "burn":
		// Burn CPU until this process has used DURATION of it, however
		// slow the emulated CPU is, then record that and wait.
		d, err := time.ParseDuration(arg)
		check(err)
		var used time.Duration
		for used < d {
			for i := 0; i < 1e6; i++ {
			}
			var ru unix.Rusage
			check(unix.Getrusage(unix.RUSAGE_SELF, &ru))
			used = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		mark(fmt.Sprint(used.Nanoseconds()))
	case "alloc":
		mib, err := strconv.Atoi(arg)
		check(err)
		b := make([]byte, mib<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		mark("ok")
		defer func() { b[0]++ }()
	case "stats":
		r, err := stats.NewReader()
		check(err)
		x, err := r.ReadExtended("", arg)
		check(err)
		oom, err := r.OOMKilled(arg)
		check(err)
		check(json.NewEncoder(os.Stdout).Encode(map[string]any{"version": r.Version(), "stats": x, "oom": oom}))
		return
	case "oom":
		oom, err := stats.OOMKilled(arg)
		check(err)
		check(os.WriteFile(os.Args[3], []byte(strconv.FormatBool(oom)), 0o644))
		return
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
	// Stay alive to be measured; systemd stops the unit.
	for {
		time.Sleep(time.Hour)
	}
}

func mark(s string) {
	if len(os.Args) > 3 {
		check(os.WriteFile(os.Args[3], []byte(s), 0o644))
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}
