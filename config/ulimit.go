package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Ulimit is one runtime.default_ulimits entry: name=soft[:hard], CRI-O's
// format ("nofile=1048576:1048576"); a lone value sets both limits, -1 or
// "unlimited" is RLIM_INFINITY.
type Ulimit struct {
	// Name is the setrlimit(2) resource without RLIMIT_, lower case.
	Name       string
	Soft, Hard uint64
}

// ulimitNames are the resources of setrlimit(2), as Docker and CRI-O
// spell them.
var ulimitNames = []string{
	"as", "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice",
	"nofile", "nproc", "rss", "rtprio", "rttime", "sigpending", "stack",
}

// ParseUlimit reads one name=soft[:hard] entry.
func ParseUlimit(s string) (Ulimit, error) {
	name, val, ok := strings.Cut(s, "=")
	if !ok {
		return Ulimit{}, fmt.Errorf("%q is not name=soft[:hard]", s)
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if !slices.Contains(ulimitNames, name) {
		return Ulimit{}, fmt.Errorf("%q: unknown limit %q (one of %s)", s, name, strings.Join(ulimitNames, ", "))
	}
	softS, hardS, hasHard := strings.Cut(val, ":")
	if !hasHard {
		hardS = softS
	}
	soft, err := parseRlimitValue(softS)
	if err != nil {
		return Ulimit{}, fmt.Errorf("%q: soft limit: %w", s, err)
	}
	hard, err := parseRlimitValue(hardS)
	if err != nil {
		return Ulimit{}, fmt.Errorf("%q: hard limit: %w", s, err)
	}
	if soft > hard {
		return Ulimit{}, fmt.Errorf("%q: soft limit above hard limit", s)
	}
	return Ulimit{Name: name, Soft: soft, Hard: hard}, nil
}

func parseRlimitValue(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	if s == "-1" || s == "unlimited" {
		return math.MaxUint64, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number, -1 or unlimited", s)
	}
	return v, nil
}

// Ulimits parses runtime.default_ulimits (Validate has checked them).
func (r Runtime) Ulimits() ([]Ulimit, error) {
	out := make([]Ulimit, 0, len(r.DefaultUlimits))
	for _, s := range r.DefaultUlimits {
		u, err := ParseUlimit(s)
		if err != nil {
			return nil, fmt.Errorf("runtime.default_ulimits: %w", err)
		}
		if slices.ContainsFunc(out, func(o Ulimit) bool { return o.Name == u.Name }) {
			return nil, fmt.Errorf("runtime.default_ulimits: %s given twice", u.Name)
		}
		out = append(out, u)
	}
	return out, nil
}
