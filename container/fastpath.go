package container

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/procstat"
)

// Local answers that spare a D-Bus round trip (or a runtime fork) when
// the evidence on this host is conclusive; any doubt takes the systemd
// path. See docs/containers.md, "Fast paths".

// initProc identifies a running container's init: its PID and the kernel's
// start time of that process, which a recycled PID cannot share.
type initProc struct {
	pid   int
	start uint64 // /proc/<pid>/stat field 22, clock ticks since boot
}

// captureInit learns the init of r's running unit: the PID the runtime
// wrote to the unit's PIDFile, taken only if that process lives in the
// container's own cgroup (below the unit, whose name holds the container
// ID), which rules out a recycled PID and a /proc of another PID
// namespace. Callers know the unit was active a moment ago.
func (m *Manager) captureInit(c *ctr) {
	r := c.rec
	c.init = initProc{}
	b, err := os.ReadFile(m.pidFile(r.ID))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	st, err := procstat.Read(m.procRoot, pid)
	if err != nil || st.Exited() {
		return
	}
	cg, err := os.ReadFile(filepath.Join(m.procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil || !inContainerCgroup(cg, r.Unit) {
		return
	}
	// Read the start time again: the cgroup file must describe the same
	// process the first read saw.
	if again, err := procstat.Read(m.procRoot, pid); err != nil || again.State != st.State || again.Start != st.Start {
		return
	}
	c.init = initProc{pid: pid, start: st.Start}
}

// inContainerCgroup reports whether a /proc/<pid>/cgroup listing puts the
// process in the container cgroup below unit (the spec's cgroupsPath is
// <slice path>/<unit>/container), in any hierarchy.
func inContainerCgroup(listing []byte, unit string) bool {
	want := "/" + unit + "/container"
	for _, line := range strings.Split(string(listing), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.HasSuffix(parts[2], want) {
			return true
		}
	}
	return false
}

// initRunning reports whether local evidence proves c's RUNNING container
// still runs: no exit record yet (ExecStopPost writes it once the init is
// gone) and the init recorded at start is alive and is the same process.
// False means "ask systemd", never "exited".
func (m *Manager) initRunning(c *ctr) bool {
	r := c.rec
	if r == nil || r.State != StateRunning || c.init.pid == 0 {
		return false
	}
	if _, err := os.Lstat(m.exitFile(r.ID)); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	st, err := procstat.Read(m.procRoot, c.init.pid)
	return err == nil && !st.Exited() && st.Start == c.init.start
}

// refreshStatusLocked is refreshLocked for a status read: a container
// whose init provably runs is answered from memory.
func (m *Manager) refreshStatusLocked(ctx context.Context, c *ctr) {
	if m.initRunning(c) {
		return
	}
	m.refreshLocked(ctx, c, "")
}

// unitCleanup is what Remove must do about a container's unit, from one
// listing (by name: unlike a property read or a stop, it makes systemd
// load no stub). Not loaded: nothing. Loaded but stopped (inactive or
// failed, as right after a StopContainer, before systemd collects it):
// only a reset-failed, after which CollectMode=inactive-or-failed unloads
// it; a kill and a stop job would find nothing to stop. Anything else,
// an error included: the full kill, stop and reset.
func (m *Manager) unitCleanup(ctx context.Context, unit string) (stop, reset bool) {
	if m.unitCollected(unit) {
		return false, false
	}
	units, err := m.sd.ListUnits(ctx, unit)
	switch {
	case err != nil:
		return true, true
	case len(units) == 0:
		return false, false
	}
	for _, u := range units {
		if u.Name == unit && u.LoadState == "loaded" && (u.ActiveState == "inactive" || u.ActiveState == "failed") && u.JobId == 0 {
			return false, true
		}
	}
	return true, true
}

// unitCollected reports whether systemd has certainly freed the transient
// unit: its directory of transient units' files exists and holds none for
// unit. systemd unlinks the file only as it frees the unit (not on a
// reload), so this answers what the listing would, for ~1 ms less of
// RemoveContainer (issue 20). False means "ask systemd".
func (m *Manager) unitCollected(unit string) bool {
	if m.transientDir == "" || unit == "" || strings.ContainsRune(unit, '/') {
		return false
	}
	if fi, err := os.Stat(m.transientDir); err != nil || !fi.IsDir() {
		return false
	}
	_, err := os.Lstat(filepath.Join(m.transientDir, unit))
	return errors.Is(err, fs.ErrNotExist)
}

// stateDirRuntime is a Runtime that can tell where it keeps a container's
// state, so Remove can see the recorder's `delete` already did its work.
type stateDirRuntime interface {
	// StateDir is the container's state directory (oci.CLI).
	StateDir(id string) string
}

// runtimeStateGone reports whether the runtime certainly holds no state
// for id: its root exists (so it is the right place to look) and has no
// entry for the container. runc and crun remove that directory last when
// deleting, so its absence means a `delete` would do nothing.
func runtimeStateGone(rt oci.Runtime, id string) bool {
	sr, ok := rt.(stateDirRuntime)
	// Anything but a hex ID must not become a path.
	if !ok || !validID(id) {
		return false
	}
	dir := sr.StateDir(id)
	if fi, err := os.Stat(filepath.Dir(dir)); err != nil || !fi.IsDir() {
		return false
	}
	_, err := os.Lstat(dir)
	return errors.Is(err, fs.ErrNotExist)
}

// validID: container IDs are hex; anything else must not become a path.
func validID(id string) bool {
	if id == "" {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
