package oci

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// EnsureHostPropagation makes the host mount under hostPath able to carry the
// propagation a CRI mount asks for: rslave needs the host side shared or a
// slave, rshared needs it shared. Otherwise new host mounts would never reach
// the container (and container mounts never the host). The mount point is
// made shared, non-recursively, only when it is not already suitable.
func EnsureHostPropagation(hostPath string, p runtimeapi.MountPropagation) error {
	if p == runtimeapi.MountPropagation_PROPAGATION_PRIVATE {
		return nil
	}
	real, err := filepath.EvalSymlinks(hostPath)
	if err != nil {
		return fmt.Errorf("mount propagation for %q: %w", hostPath, err)
	}
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(real))
	if err != nil {
		return fmt.Errorf("mount propagation for %q: %w", hostPath, err)
	}
	var m *mountinfo.Info
	for _, c := range mounts {
		if m == nil || len(c.Mountpoint) >= len(m.Mountpoint) {
			m = c
		}
	}
	if m == nil {
		return fmt.Errorf("mount propagation for %q: no mount found", hostPath)
	}
	if !needsShared(m.Optional, p) {
		return nil
	}
	if err := unix.Mount("", m.Mountpoint, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared for %q: %w", m.Mountpoint, hostPath, err)
	}
	return nil
}

// needsShared decides from mountinfo's optional fields ("shared:N master:M").
func needsShared(optional string, p runtimeapi.MountPropagation) bool {
	shared := strings.Contains(optional, "shared:")
	slave := strings.Contains(optional, "master:")
	switch p {
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		return !shared
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		return !shared && !slave
	}
	return false
}

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

// StopSignal is the signal that stops the container: the config's, else the
// image's, else SIGTERM.
func StopSignal(img ImageConfig, cfg *runtimeapi.ContainerConfig) (syscall.Signal, error) {
	if s := cfg.GetStopSignal(); s != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return ParseSignal(s.String())
	}
	if img.StopSignal != "" {
		return ParseSignal(img.StopSignal)
	}
	return syscall.SIGTERM, nil
}
