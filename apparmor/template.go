package apparmor

import (
	"fmt"
	"io"
	"strings"
	"text/template"

	"github.com/podunit/podunit/errdefs"
)

// Params fill the default profile's template.
type Params struct {
	// Name of the profile; container processes may signal and trace peers
	// confined by the same profile.
	Name string
	// ABI pins the policy ABI ("abi/3.0") when the parser has it: with ABI
	// 4.0 a bare "network," no longer covers unix sockets.
	ABI string
	// Tunables includes <tunables/global> (defines @{PROC}); without it
	// @{PROC} is defined inline.
	Tunables bool
	// BaseAbstraction includes <abstractions/base>.
	BaseAbstraction bool
	// DaemonProfile is the profile podunit runs under ("unconfined"
	// usually); it may signal container processes.
	DaemonProfile string
}

// The rules are those of Docker's docker-default and containerd's
// cri-containerd.apparmor.d, which every CRI conformance suite runs under:
// everything is allowed except mounting, writes to the kernel's knobs in
// /proc and /sys, and signals and ptrace from outside the container.
var profileTemplate = template.Must(template.New("podunit-default").Funcs(template.FuncMap{"q": quote}).Parse(
	`# podunit's default AppArmor profile for containers (generated, loaded
# with apparmor_parser -Kr; see docs/oci.md).
{{if .ABI}}abi <{{.ABI}}>,
{{end -}}
{{if .Tunables}}#include <tunables/global>
{{else}}@{PROC}=/proc/
{{end}}
profile {{q .Name}} flags=(attach_disconnected,mediate_deleted) {
{{- if .BaseAbstraction}}
  #include <abstractions/base>
{{- end}}

  network,
  capability,
  file,
  umount,

  # signals: from unconfined processes (systemd, kubelet, the host), the
  # OCI runtimes and podunit; among the container's own processes
  signal (receive) peer=unconfined,
  signal (receive) peer=runc,
  signal (receive) peer=crun,
{{- if ne .DaemonProfile "unconfined"}}
  signal (receive) peer={{q .DaemonProfile}},
{{- end}}
  signal (send,receive) peer={{q .Name}},

  # /proc: no writes to files directly in /proc, nor below it except in
  # /proc/<pid>/ and /proc/sys/kernel/shm*
  deny @{PROC}/* w,
  deny @{PROC}/{[^1-9/],[^1-9/][^0-9/],[^1-9s/][^0-9y/][^0-9s/],[^1-9/][^0-9/][^0-9/][^0-9/]*}/** w,
  deny @{PROC}/sys/[^k]** w,
  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,

  deny mount,

  # /sys: read-only except the container's cgroup tree; firmware, powercap
  # and securityfs not even readable
  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,

  # ps, strace and the like among the container's own processes (Yama and
  # capabilities still apply)
  ptrace (trace,read,tracedby,readby) peer={{q .Name}},
}
`))

// Generate writes the default profile for p.
func Generate(w io.Writer, p Params) error {
	if err := validName(p.Name); err != nil {
		return err
	}
	if p.DaemonProfile == "" {
		p.DaemonProfile = "unconfined"
	}
	if err := validName(p.DaemonProfile); err != nil {
		return err
	}
	return profileTemplate.Execute(w, p)
}

// validName rejects names the profile language cannot quote.
func validName(n string) error {
	if n == "" || strings.ContainsAny(n, "\"\\\x00\n\r") {
		return fmt.Errorf("apparmor: profile name %q: %w", n, errdefs.ErrInvalid)
	}
	return nil
}

// quote writes a profile name as a quoted string when it needs it.
func quote(n string) string {
	if strings.ContainsAny(n, " \t#,(){}[]*?=") {
		return `"` + n + `"`
	}
	return n
}
