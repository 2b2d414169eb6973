package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/podunit/podunit/procstat"
)

// cpuTicks reads utime+stime (clock ticks) of every process of the harness.
func cpuTicks(harness string) map[procKey]struct {
	comm  string
	ticks uint64
} {
	out := map[procKey]struct {
		comm  string
		ticks uint64
	}{}
	_ = harnessProcs(harness, func(pid int, dir string) {
		st, err := procstat.Read(filepath.Dir(dir), pid)
		if err != nil {
			return
		}
		out[procKey{pid, st.Start}] = struct {
			comm  string
			ticks uint64
		}{st.Comm, st.UTime + st.STime}
	})
	return out
}

// cmdCPUWatch runs a command and reports the CPU seconds each process name
// of the harness used meanwhile, sampling every 100 ms (a process that lives
// shorter than that may be missed; the long-lived ones dominate).
func cmdCPUWatch(args []string) error {
	fs := flag.NewFlagSet("cpuwatch", flag.ExitOnError)
	harness := fs.String("harness", "", "the harness' cgroup name")
	label := fs.String("label", "", "first column of every output line")
	fs.Parse(args)
	if *harness == "" || fs.NArg() == 0 {
		return fmt.Errorf("usage: cpuwatch -harness NAME [-label L] -- COMMAND")
	}
	first := cpuTicks(*harness)
	last := map[procKey]struct {
		comm  string
		ticks uint64
	}{}
	for k, v := range first {
		last[k] = v
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var runErr error
loop:
	for {
		for k, v := range cpuTicks(*harness) {
			last[k] = v
		}
		select {
		case runErr = <-done:
			break loop
		case <-time.After(100 * time.Millisecond):
		}
	}
	hz := 100.0 // USER_HZ on Linux
	by := map[string]float64{}
	for k, v := range last {
		by[v.comm] += float64(v.ticks-first[k].ticks) / hz
	}
	names := make([]string, 0, len(by))
	for n := range by {
		if by[n] >= 0.01 {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]] > by[names[j]] })
	for _, n := range names {
		fmt.Printf("cpu %s %s %.2f\n", *label, n, by[n])
	}
	return runErr
}
