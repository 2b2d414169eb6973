// Package unitprops builds the systemd properties of a container's transient
// service. Every builder is pure: the same inputs and Caps give the same
// properties, so the whole unit is pinned by golden files in testdata/.
package unitprops

import (
	"fmt"
	"strings"
	"time"

	godbus "github.com/godbus/dbus/v5"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Caps describes the systemd and cgroup setup the properties are for.
type Caps struct {
	// SystemdVersion is the manager's version (252 on Debian 12).
	SystemdVersion int
	// CgroupV2 is true on a unified hierarchy; v1/hybrid otherwise.
	CgroupV2 bool
}

// Exec is one command line of ExecStart= / ExecStopPost=.
type Exec struct {
	Argv []string
	// IgnoreFailure is the "-" prefix: a non-zero exit does not fail the unit.
	IgnoreFailure bool
}

// Service is everything a container's unit is made of besides its limits.
type Service struct {
	Unit        string // for error messages only; the name is not a property
	Slice       string
	Description string
	// ExecStart is the control process that creates and starts the
	// container; it names the container's init the main process with
	// sd_notify (MAINPID=) before the init runs.
	ExecStart Exec
	// ExecStopPost runs after the main process is gone, also when the start
	// failed; it records the exit status while podunit may be down.
	ExecStopPost Exec
	// KillSignal is sent to the main process on stop (image StopSignal).
	KillSignal int
	// StopTimeout is how long the main process has after KillSignal before
	// systemd SIGKILLs the whole cgroup. Zero means the systemd default.
	StopTimeout time.Duration
	// StartTimeout bounds the start job (ExecStart): the runtime's create
	// and start. Zero means the manager's
	// DefaultTimeoutStartSec, which differs between nodes and would let
	// systemd kill a slow start that podunit still waits for.
	StartTimeout time.Duration
	// SyslogIdentifier names the container's journal lines.
	SyslogIdentifier string
	// LogFields are "KEY=value" journal fields added to every line of the unit.
	LogFields []string
	// JournalRateLimit is journald's per-unit rate limit for the unit's
	// output; the zero value turns it off (journald's default would apply
	// with the property unset).
	JournalRateLimit RateLimit
	// OOMPolicy, when set, is systemd's OOMPolicy= ("kill" makes systemd
	// set memory.oom.group on the unit's cgroup): how a container without
	// a cgroup of its own gets CRI's unified memory.oom.group (OOMPolicy).
	OOMPolicy string
}

// RateLimit is at most Burst journal lines per Interval; either zero is off.
type RateLimit struct {
	Interval time.Duration
	Burst    uint32
}

// execCommand has the D-Bus shape (sasb) of ExecStart= entries. The bool
// is systemd's ignore_failure (the "-" prefix), whatever go-systemd's
// PropExecStart calls it.
type execCommand struct {
	Path          string
	Args          []string
	IgnoreFailure bool
}

func prop(name string, v any) systemd.Property {
	return systemd.Property{Name: name, Value: godbus.MakeVariant(v)}
}

func execProp(name string, e Exec) systemd.Property {
	return prop(name, []execCommand{{Path: e.Argv[0], Args: e.Argv, IgnoreFailure: e.IgnoreFailure}})
}

// Properties returns the unit properties for s plus the resource
// properties of r (see Resources).
func Properties(s Service, r *runtimeapi.LinuxContainerResources, caps Caps) ([]systemd.Property, error) {
	if !strings.HasSuffix(s.Slice, ".slice") || strings.Contains(s.Slice, "/") {
		return nil, fmt.Errorf("unit %s: slice %q: %w", s.Unit, s.Slice, errdefs.ErrInvalid)
	}
	if len(s.ExecStart.Argv) == 0 {
		return nil, fmt.Errorf("unit %s: ExecStart is required: %w", s.Unit, errdefs.ErrInvalid)
	}
	props := []systemd.Property{
		prop("Description", s.Description),
		prop("Slice", s.Slice),
		// ExecStart creates the container, names its init the main process
		// (MAINPID=, so only a control process's messages: exec), starts
		// it and exits; the unit is active when it has. No PID file to
		// read and no guessing: the main PID is what ExecStart said.
		prop("Type", "forking"),
		prop("NotifyAccess", "exec"),
		prop("GuessMainPID", false),
		execProp("ExecStart", s.ExecStart),
		// The OCI runtime creates the container's own cgroup below the unit's.
		prop("Delegate", true),
		// Failed units would otherwise pile up (each one pins a name and
		// memory in PID 1); ExecStopPost has recorded the status by then.
		prop("CollectMode", "inactive-or-failed"),
		// SIGTERM to the container's init only, SIGKILL to everything left
		// after the timeout: the semantics of docker/containerd stop.
		prop("KillMode", "mixed"),
		prop("SendSIGKILL", true),
		// Only the journal's copy of the output: the relay writes the CRI log
		// file itself.
		prop("LogRateLimitIntervalUSec", uint64(s.JournalRateLimit.Interval/time.Microsecond)),
		prop("LogRateLimitBurst", s.JournalRateLimit.Burst),
		// systemd's DefaultTasksMax is meant for daemons, not workloads;
		// pids limits belong to the pod's slice (kubelet podPidsLimit).
		PidsProperty(0),
	}
	if len(s.ExecStopPost.Argv) > 0 {
		props = append(props, execProp("ExecStopPost", s.ExecStopPost))
	}
	if s.KillSignal > 0 {
		props = append(props, prop("KillSignal", int32(s.KillSignal)))
	}
	if s.StopTimeout > 0 {
		props = append(props, prop("TimeoutStopUSec", uint64(s.StopTimeout/time.Microsecond)))
	}
	if s.StartTimeout > 0 {
		props = append(props, prop("TimeoutStartUSec", uint64(s.StartTimeout/time.Microsecond)))
	}
	if s.SyslogIdentifier != "" {
		props = append(props, prop("SyslogIdentifier", s.SyslogIdentifier))
	}
	if s.OOMPolicy != "" {
		props = append(props, prop("OOMPolicy", s.OOMPolicy))
	}
	if len(s.LogFields) > 0 {
		fields := make([][]byte, 0, len(s.LogFields))
		for _, f := range s.LogFields {
			if err := validLogField(f); err != nil {
				return nil, fmt.Errorf("unit %s: %w", s.Unit, err)
			}
			fields = append(fields, []byte(f))
		}
		props = append(props, prop("LogExtraFields", fields))
	}
	rp, err := ResourceProperties(r, caps)
	if err != nil {
		return nil, fmt.Errorf("unit %s: %w", s.Unit, err)
	}
	return append(props, rp...), nil
}

// validLogField enforces journald's field rules: upper case, digits and
// underscore, not starting with an underscore (those are trusted fields).
func validLogField(f string) error {
	k, _, ok := strings.Cut(f, "=")
	if !ok || k == "" || k[0] == '_' || len(k) > 64 {
		return fmt.Errorf("log field %q: %w", f, errdefs.ErrInvalid)
	}
	for _, r := range k {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("log field %q: %w", f, errdefs.ErrInvalid)
		}
	}
	return nil
}
