// Package seccomp turns seccomp profiles into runtime-spec LinuxSeccomp
// filters. It reads both the plain runtime-spec form and the Docker/containerd
// profile form (archMap, per-rule includes/excludes by capability and
// architecture), because that is what Localhost profiles written for other
// runtimes use. The built-in RuntimeDefault profile is data in default.go and
// goes through the same filter as a loaded profile.
package seccomp

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/errdefs"
)

// Filter is what a profile's includes/excludes are evaluated against.
type Filter struct {
	// Arch is a GOARCH value ("amd64", "arm64"...); empty means this binary's.
	Arch string
	// Caps is the container's effective capability set, "CAP_" names.
	Caps []string
}

// Profile is the Docker/containerd seccomp profile document. A plain
// runtime-spec LinuxSeccomp document decodes into it unchanged.
type Profile struct {
	DefaultAction    specs.LinuxSeccompAction `json:"defaultAction"`
	DefaultErrnoRet  *uint                    `json:"defaultErrnoRet,omitempty"`
	Architectures    []specs.Arch             `json:"architectures,omitempty"`
	ArchMap          []ArchMap                `json:"archMap,omitempty"`
	Flags            []specs.LinuxSeccompFlag `json:"flags,omitempty"`
	ListenerPath     string                   `json:"listenerPath,omitempty"`
	ListenerMetadata string                   `json:"listenerMetadata,omitempty"`
	Syscalls         []Syscall                `json:"syscalls"`
}

// ArchMap lists the sub-architectures a native architecture also runs.
type ArchMap struct {
	Arch      specs.Arch   `json:"architecture"`
	SubArches []specs.Arch `json:"subArchitectures"`
}

// Syscall is one rule; Name is the legacy single-name form.
type Syscall struct {
	Name     string                   `json:"name,omitempty"`
	Names    []string                 `json:"names,omitempty"`
	Action   specs.LinuxSeccompAction `json:"action"`
	ErrnoRet *uint                    `json:"errnoRet,omitempty"`
	Args     []specs.LinuxSeccompArg  `json:"args,omitempty"`
	Comment  string                   `json:"comment,omitempty"`
	Includes *Gate                    `json:"includes,omitempty"`
	Excludes *Gate                    `json:"excludes,omitempty"`
}

// Gate selects rules by architecture and capability. MinKernel is accepted
// and ignored: every kernel a cgroup-aware runtime supports is newer than the
// versions profiles name.
type Gate struct {
	Arches    []string `json:"arches,omitempty"`
	Caps      []string `json:"caps,omitempty"`
	MinKernel string   `json:"minKernel,omitempty"`
}

// seccompArch maps GOARCH to libseccomp's native architecture name.
var seccompArch = map[string]specs.Arch{
	"386":      specs.ArchX86,
	"amd64":    specs.ArchX86_64,
	"arm":      specs.ArchARM,
	"arm64":    specs.ArchAARCH64,
	"mips":     specs.ArchMIPS,
	"mips64":   specs.ArchMIPS64,
	"mipsle":   specs.ArchMIPSEL,
	"mips64le": specs.ArchMIPSEL64,
	"ppc64":    specs.ArchPPC64,
	"ppc64le":  specs.ArchPPC64LE,
	"s390x":    specs.ArchS390X,
	"riscv64":  specs.ArchRISCV64,
	"loong64":  specs.ArchLOONGARCH64,
}

// Parse decodes a profile document, rejecting unknown fields so a typo in a
// Localhost profile is an error rather than a silently weaker filter.
func Parse(data []byte) (*Profile, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("seccomp profile: %w: %w", errdefs.ErrInvalid, err)
	}
	if p.DefaultAction == "" {
		return nil, fmt.Errorf("seccomp profile: %w: defaultAction is required", errdefs.ErrInvalid)
	}
	return &p, nil
}

// Load parses data and filters it for f.
func Load(data []byte, f Filter) (*specs.LinuxSeccomp, error) {
	p, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return p.Build(f)
}

// Build evaluates includes/excludes against f and returns the runtime-spec
// filter.
func (p *Profile) Build(f Filter) (*specs.LinuxSeccomp, error) {
	goarch := f.Arch
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	out := &specs.LinuxSeccomp{
		DefaultAction:    p.DefaultAction,
		DefaultErrnoRet:  p.DefaultErrnoRet,
		Flags:            slices.Clone(p.Flags),
		ListenerPath:     p.ListenerPath,
		ListenerMetadata: p.ListenerMetadata,
	}
	switch {
	case len(p.Architectures) > 0 && len(p.ArchMap) > 0:
		return nil, fmt.Errorf("seccomp profile: %w: both architectures and archMap are set", errdefs.ErrInvalid)
	case len(p.Architectures) > 0:
		out.Architectures = slices.Clone(p.Architectures)
	default:
		native := seccompArch[goarch]
		for _, m := range p.ArchMap {
			if m.Arch == native {
				out.Architectures = append(append(out.Architectures, m.Arch), m.SubArches...)
			}
		}
	}
	for i, sc := range p.Syscalls {
		names := sc.Names
		if sc.Name != "" {
			if len(sc.Names) > 0 {
				return nil, fmt.Errorf("seccomp profile: %w: syscalls[%d] sets both name and names", errdefs.ErrInvalid, i)
			}
			names = []string{sc.Name}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("seccomp profile: %w: syscalls[%d] has no names", errdefs.ErrInvalid, i)
		}
		if sc.Action == "" {
			return nil, fmt.Errorf("seccomp profile: %w: syscalls[%d] has no action", errdefs.ErrInvalid, i)
		}
		if !included(sc.Includes, goarch, f.Caps) || excluded(sc.Excludes, goarch, f.Caps) {
			continue
		}
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{
			Names:    slices.Clone(names),
			Action:   sc.Action,
			ErrnoRet: sc.ErrnoRet,
			Args:     slices.Clone(sc.Args),
		})
	}
	return out, nil
}

// included: every condition the gate names must hold (Docker semantics).
func included(g *Gate, arch string, caps []string) bool {
	if g == nil {
		return true
	}
	if len(g.Arches) > 0 && !slices.Contains(g.Arches, arch) {
		return false
	}
	for _, c := range g.Caps {
		if !slices.Contains(caps, c) {
			return false
		}
	}
	return true
}

// excluded: any condition the gate names is enough to drop the rule.
func excluded(g *Gate, arch string, caps []string) bool {
	if g == nil {
		return false
	}
	if slices.Contains(g.Arches, arch) {
		return true
	}
	for _, c := range g.Caps {
		if slices.Contains(caps, c) {
			return true
		}
	}
	return false
}
