package gc

import (
	"context"
	"errors"
	"fmt"

	"github.com/podunit/podunit/systemd"
)

// Units collects podunit's transient units that no record owns: those are
// left by a crash between StartTransientUnit and the state write. Live
// unknown units are stopped; failed ones are reset so their name and
// systemd's memory are given back (the 131k-leaked-units failure mode).
type Units struct {
	Conn     systemd.Conn
	Patterns []string // e.g. "podunit-*.service", "podunit-pod-*.slice"
	Known    func(unit string) bool
	// Leftover, if set, is given the cgroup path of each unit collected
	// once it is dead (unitcgroup.RemoveLeftover: on v1 the OCI runtime's
	// directories below a unit outlive it).
	Leftover func(cgroupPath string) error
}

func (u Units) Name() string { return "units" }

func (u Units) Collect(ctx context.Context, dryRun bool) ([]string, error) {
	units, err := u.Conn.ListUnits(ctx, u.Patterns...)
	if err != nil {
		return nil, err
	}
	var out []string
	var errs []error
	for _, st := range units {
		if u.Known(st.Name) {
			continue
		}
		cg := ""
		if u.Leftover != nil && !dryRun {
			p, err := u.Conn.UnitProperties(ctx, st.Name, "Service", "Slice")
			if s, _ := p["Slice"].(string); err == nil && s != "" {
				cg = systemd.UnitCgroupPath(s, st.Name)
			}
		}
		dead := true
		switch st.ActiveState {
		case "failed":
			out = append(out, st.Name+" (failed: reset)")
			if !dryRun {
				if err := u.Conn.ResetFailedUnit(ctx, st.Name); err != nil {
					errs = append(errs, err)
					dead = false
				}
			}
		case "inactive":
			// Loaded but dead and not failed: systemd drops it by itself.
		default:
			out = append(out, st.Name+" ("+st.ActiveState+": stopped)")
			if !dryRun {
				if err := u.Conn.StopUnit(ctx, st.Name); err != nil {
					errs = append(errs, fmt.Errorf("stop %s: %w", st.Name, err))
					dead = false
				}
			}
		}
		if !dryRun && dead && cg != "" {
			if err := u.Leftover(cg); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", st.Name, err))
			}
		}
	}
	return out, errors.Join(errs...)
}
