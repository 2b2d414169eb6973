package oci

import (
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ParseSignal reads a stop signal as images ("SIGTERM", "TERM", "15",
// "RTMIN+3") and the CRI enum ("SIGNAL_SIGRTMIN_PLUS_3") spell it.
func ParseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	name = strings.TrimPrefix(name, "SIGNAL_")
	for _, r := range []struct{ from, to string }{{"_PLUS_", "+"}, {"_MINUS_", "-"}, {"MINPLUS", "MIN+"}, {"MAXMINUS", "MAX-"}} {
		name = strings.ReplaceAll(name, r.from, r.to)
	}
	if n, err := strconv.Atoi(name); err == nil {
		if n <= 0 || n > 64 {
			return 0, invalid("signal", "%q out of range", s)
		}
		return syscall.Signal(n), nil
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	// Linux real-time signals as Docker and the CRI number them: glibc
	// reserves 32 and 33, so RTMIN is 34 and RTMAX 64.
	for _, rt := range []struct {
		prefix string
		base   int
		sign   int
	}{{"SIGRTMIN", 34, 1}, {"SIGRTMAX", 64, -1}} {
		rest, ok := strings.CutPrefix(name, rt.prefix)
		if !ok {
			continue
		}
		off := 0
		if rest != "" {
			op, num := rest[0], rest[1:]
			v, err := strconv.Atoi(num)
			if err != nil || (op == '+' && rt.sign < 0) || (op == '-' && rt.sign > 0) || (op != '+' && op != '-') {
				return 0, invalid("signal", "unknown signal %q", s)
			}
			off = v
		}
		n := rt.base + rt.sign*off
		if n < 34 || n > 64 {
			return 0, invalid("signal", "%q out of range", s)
		}
		return syscall.Signal(n), nil
	}
	if alias, ok := signalAliases[name]; ok {
		name = alias
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, invalid("signal", "unknown signal %q", s)
}

// signalAliases are names the CRI enum uses that Go's table lacks.
var signalAliases = map[string]string{
	"SIGCLD": "SIGCHLD", "SIGPOLL": "SIGIO", "SIGIOT": "SIGABRT", "SIGUNUSED": "SIGSYS",
}
