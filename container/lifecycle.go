package container

import (
	"context"
	"errors"
	"fmt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/logs"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/unitprops"
	"golang.org/x/sys/unix"
)

// safetyStopTimeout is the unit's own TimeoutStopSec: podunit enforces
// each StopContainer's timeout itself; this only bounds a stop started
// while podunit is down (`systemctl stop`, shutdown).
const safetyStopTimeout = 10 * time.Minute

// service describes r's unit; the pure builder turns it into properties.
//
// The runtime runs in two steps, both in the unit's ExecStart wrapper
// (package stdio): the create, after which the container's init exists and
// waits; then the wrapper names that init the unit's main process
// (MAINPID= with a barrier; the unit is Type=forking without a PID file),
// and only then runs the start. So systemd always adopts a live main PID
// that is its own child before the container can exit, and reports its
// exit status. With `run --detach` in one step a container that exits at
// once left a zombie behind the PID file, which systemd refuses ("New main
// PID does not exist or is a zombie", result 'protocol'); the start as an
// ExecStartPost of its own cost one more fork, child setup and cgroup
// attach in systemd per start. With a private mount namespace the runtime
// runs in it, so it finds the root filesystem and the pins podunit
// mounted there, and poststart hooks see what the container sees: the
// wrapper and the recorder run it on a thread that entered the namespace
// (--mount-ns, mountns.OnThread).
func (m *Manager) service(r *record, rt oci.Runtime) unitprops.Service {
	name := r.Metadata.GetName()
	helper := m.opts.UnitHelper
	if helper == "" {
		helper = m.opts.Self
	}
	var inNS []string
	if m.opts.MountNS != "" {
		inNS = []string{"--mount-ns", m.opts.MountNS}
	}
	execStart := append([]string{helper, "_stdio", "--unit", r.Unit, "--identifier", name,
		"--cgroup-root", m.opts.CgroupRoot, "--cgroup-leaf", "runtime", "--pid-file", m.pidFile(r.ID)}, inNS...)
	consoleSocket := ""
	if r.Config.GetTty() {
		// The terminal's slave is the container's stdin, stdout and stderr.
		consoleSocket = m.consoleSocket(r.ID)
		execStart = append(execStart, "--console-socket", consoleSocket)
	} else if r.Config.GetStdin() {
		execStart = append(execStart, "--stdin-fifo", m.stdinFIFO(r.ID))
	}
	var relay []string
	if m.opts.LogRelaySocket != "" {
		relay = []string{"--relay-socket", m.opts.LogRelaySocket, "--relay-id", r.ID}
		execStart = append(execStart, relay...)
		if r.LogPath != "" {
			execStart = append(execStart, "--log-path", r.LogPath)
		}
		if m.opts.NoJournal {
			execStart = append(execStart, "--no-journal")
		}
	}
	if r.Restore {
		// One step: the restored init runs as soon as CRIU is done, and
		// the runtime exits with its PID in the PID file, like create.
		execStart = append(append(execStart, "--"), rt.RestoreArgv(r.ID, m.bundleDir(r.ID), m.pidFile(r.ID), m.runtimeLog(r.ID), m.restoreCheckpoint(r.ID))...)
	} else {
		for _, a := range rt.StartArgv(r.ID, m.runtimeLog(r.ID)) {
			execStart = append(execStart, "--start-arg="+a)
		}
		execStart = append(append(execStart, "--"), rt.CreateArgv(r.ID, m.bundleDir(r.ID), m.pidFile(r.ID), m.runtimeLog(r.ID), consoleSocket)...)
	}
	stopPost := append([]string{helper, "_exitrec", "--cgroup", systemd.UnitCgroupPath(r.Slice, r.Unit),
		"--cgroup-root", m.opts.CgroupRoot, "--relay-pid-file", m.pidFile(r.ID) + ".relay"}, inNS...)
	stopPost = append(append(stopPost, relay...), m.stateDir(r.ID))
	if del := rt.DeleteArgv(r.ID); len(del) > 0 {
		stopPost = append(append(stopPost, "--"), del...)
	}
	return unitprops.Service{
		Unit:             r.Unit,
		Slice:            r.Slice,
		Description:      fmt.Sprintf("%s/%s/%s", r.PodNamespace, r.PodName, name),
		ExecStart:        unitprops.Exec{Argv: execStart},
		ExecStopPost:     unitprops.Exec{Argv: stopPost, IgnoreFailure: true},
		KillSignal:       r.StopSignal,
		StopTimeout:      safetyStopTimeout,
		StartTimeout:     m.opts.StartTimeout,
		SyslogIdentifier: name,
		JournalRateLimit: m.opts.JournalRateLimit,
		OOMPolicy:        oomPolicy(rt, r.Resources),
		LogFields: logs.ExtraFields(logs.Identity{
			PodNamespace: r.PodNamespace, PodName: r.PodName, PodUID: r.PodUID,
			ContainerName: name, ContainerID: r.ID, Attempt: r.Metadata.GetAttempt(),
		}),
	}
}

// Start runs a created container as its systemd unit and waits until the
// runtime has started its init. If the runtime fails (missing executable,
// bad user) the error carries the runtime's message, the container is
// EXITED with reason StartError and systemd collects the unit.
func (m *Manager) Start(ctx context.Context, id string) error {
	c, err := m.get(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec == nil {
		return fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	if c.rec.State != StateCreated {
		return fmt.Errorf("start container %s: state is %s, not created: %w", id, c.rec.State, errdefs.ErrPrecondition)
	}
	rt, err := m.runtime(c.rec.Handler)
	if err != nil {
		return err
	}
	props, err := unitprops.Properties(m.service(c.rec, rt), c.rec.Resources, m.opts.Caps)
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	if m.plugins != nil {
		if err := m.plugins.StartContainer(ctx, c.rec.info(0)); err != nil {
			return fmt.Errorf("start container %s: %w", id, err)
		}
	}
	if err := m.clearStartFiles(id); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	// The rootfs stays mounted from create, but a reboot or an unmount by
	// hand would leave runc an empty directory.
	if _, err := m.imgs.MountRootfs(ctx, id); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			// The container is listed, so NotFound would be wrong: in the
			// transient store (image.storage_transient) its writable layer
			// did not outlive a reboot, and it can only be created anew.
			return fmt.Errorf("start container %s: its root filesystem is gone (a reboot clears the writable layers of the transient store; create the container again): %w (%v)", id, errdefs.ErrPrecondition, err)
		}
		return fmt.Errorf("start container %s: rootfs: %w", id, err)
	}
	r := c.rec.clone()
	r.State = StateRunning
	r.StartedAt = time.Now().UnixNano()
	if err := m.save(r); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	c.rec = r
	sctx, cancel := context.WithTimeout(ctx, m.opts.StartTimeout)
	defer cancel()
	var deferred []systemd.Property
	if rt.OwnCgroup() {
		props, deferred = unitprops.SplitStartLimits(props)
	}
	var startErr error
	limitsFailed := false
	msg := ""
	for attempt := 1; ; attempt++ {
		limitsFailed, startErr = m.startUnit(sctx, r.Unit, props, deferred)
		if startErr == nil {
			break
		}
		m.discardFailedStart(ctx, r.Unit, rt, id, limitsFailed)
		msg = m.runtimeError(id)
		if attempt > 1 || !cgroupVanished(msg) {
			break
		}
		// Nothing of the container ran: its cgroup could not even be
		// made. Once more, from a clean slate.
		m.opts.Logger.Warn("container cgroup vanished while the runtime created it, starting once more", "container", id, "err", msg)
		if err := m.clearStartFiles(id); err != nil {
			return fmt.Errorf("start container %s: %w", id, err)
		}
	}
	if startErr == nil {
		if r.Restore {
			// Restored: CRIU's images are spent.
			if err := os.RemoveAll(m.restoreDir(id)); err != nil {
				m.opts.Logger.Warn("remove restored checkpoint", "container", id, "err", err)
			}
		}
		m.captureInit(c)
		m.publish(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, id, r.PodID)
		if m.plugins != nil {
			m.plugins.PostStartContainer(ctx, r.info(c.init.pid))
		}
		return nil
	}
	if r.Restore {
		if tail := oci.CRIULogTail(m.restoreCheckpoint(id).RestoreLog(), 10); tail != "" {
			msg += "; criu restore.log:\n" + tail
		}
	}
	// (discardFailedStart's stop writes an exit record too: after a refused quota it
	// is podunit's doing, not the container's exit.)
	if rec, err := exitrec.Read(m.stateDir(id)); !limitsFailed && msg == "" && err == nil && rec.ExitCode != "" {
		// The runtime reported nothing and systemd saw the init exit: the
		// container ran and was done before the start job completed (a
		// main process that fails before the wrapper exits fails the job).
		// That is a started container that exited, not a start error.
		r = r.clone()
		r.State, r.FinishedAt, r.ExitCode = StateExited, rec.FinishedAt, rec.Status()
		r.Reason = reason(r.ExitCode, rec.OOMKilled)
		m.flushLog(ctx, r)
		if err := m.save(r); err != nil {
			return fmt.Errorf("start container %s: %w", id, err)
		}
		c.rec = r
		m.publish(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, id, r.PodID)
		m.publish(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, id, r.PodID)
		m.pluginsStopped(ctx, r)
		return nil
	}
	if msg == "" {
		msg = startErr.Error()
	}
	r = r.clone()
	r.State, r.FinishedAt, r.ExitCode = StateExited, time.Now().UnixNano(), 128
	r.Reason, r.Message = ReasonStartError, msg
	if err := m.save(r); err != nil {
		m.opts.Logger.Warn("record failed start", "container", id, "err", err)
	}
	c.rec = r
	m.pluginsStopped(ctx, r)
	return fmt.Errorf("start container %s: %s: %w", id, msg, errdefs.ErrPrecondition)
}

// clearStartFiles removes what an earlier start attempt left: its pid
// files, exit record or runtime log would be read as this run's.
func (m *Manager) clearStartFiles(id string) error {
	for _, p := range []string{m.pidFile(id), m.pidFile(id) + ".relay", m.exitFile(id), m.runtimeLog(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// startUnit starts the container's unit and then sets the limits held
// back until its cgroup exists; limitsFailed says the unit started but a
// limit could not be set.
func (m *Manager) startUnit(ctx context.Context, unit string, props, deferred []systemd.Property) (limitsFailed bool, err error) {
	if err := m.sd.StartTransientUnit(ctx, unit, props); err != nil {
		return false, err
	}
	if len(deferred) > 0 {
		if err := m.applyStartLimits(ctx, unit, deferred); err != nil {
			return true, err
		}
	}
	return false, nil
}

// discardFailedStart makes sure no unit and no runtime state is left of a
// start that failed or never began, whatever state the unit is in. It
// first waits briefly for ExecStopPost's record: systemd runs it on a
// failed start too.
func (m *Manager) discardFailedStart(ctx context.Context, unit string, rt oci.Runtime, id string, limitsFailed bool) {
	if !limitsFailed {
		m.waitUnitGone(ctx, unit, 5*time.Second)
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	m.forceStopUnit(uctx, unit)
	_ = m.sd.ResetFailedUnit(uctx, unit)
	_ = rt.Delete(uctx, id)
}

// cgroupVanished says the runtime failed because a cgroup directory
// vanished while it made the container's: on cgroup v1, systemd removes
// the controller directories of a slice that are not in its own mask (the
// devices one of a pod slice, which the kubelet's cgroup manager made)
// when it re-realizes the slice's parent, and runc's MkdirAll of the path
// then races it. A transient race, not the container's fault.
func cgroupVanished(runtimeMsg string) bool {
	return strings.Contains(runtimeMsg, "unable to apply cgroup configuration") &&
		strings.Contains(runtimeMsg, "no such file or directory")
}

// forceStopUnit stops a unit whose container is being discarded (a failed
// start, a remove): SIGKILL to its main process first, so the stop job
// does not wait out TimeoutStopUSec for an init that ignores SIGTERM (a
// process that is PID 1 of its namespace does, unless it handles it).
// Only the main process: ExecStopPost's recorder must still run, and
// KillMode=mixed SIGKILLs the rest once the init is gone.
func (m *Manager) forceStopUnit(ctx context.Context, unit string) error {
	if err := m.sd.KillUnit(ctx, unit, int32(unix.SIGKILL), true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.opts.Logger.Debug("kill container init before stop", "unit", unit, "err", err)
	}
	return m.sd.StopUnit(ctx, unit)
}

// applyStartLimits sets the limits SplitStartLimits held back. A
// container that already exited and whose unit systemd collected needs
// none; any other failure fails the start (and the caller removes the
// unit): a container must not run without the limit it was given.
func (m *Manager) applyStartLimits(ctx context.Context, unit string, limits []systemd.Property) error {
	err := m.sd.SetUnitProperties(ctx, unit, limits...)
	if err == nil || errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("limits of %s: %w", unit, err)
}

// runtimeError is the runtime's own error message for a failed start: the
// last error line of the log the runtime writes next to the pid file.
func (m *Manager) runtimeError(id string) string {
	return lastRuntimeError(m.runtimeLog(id))
}

// stdinFIFO is the container's stdin when the config asks for one; an
// attach writes into it.
func (m *Manager) stdinFIFO(id string) string { return m.runDir(id) + "/stdin" }

// restoreCheckpoint is where a restored container's CRIU images are and
// where CRIU works (on disk, next to them).
func (m *Manager) restoreCheckpoint(id string) oci.Checkpoint {
	return oci.Checkpoint{
		ImagePath: filepath.Join(m.restoreDir(id), "checkpoint"),
		WorkPath:  filepath.Join(m.restoreDir(id), "criu"),
	}
}

// consoleSocket is where the runtime sends a tty container's terminal to
// the unit's wrapper, which hands it to the log relay.
func (m *Manager) consoleSocket(id string) string { return m.runDir(id) + "/console.sock" }

func (m *Manager) runtimeLog(id string) string { return m.runDir(id) + "/runtime.log" }

func (m *Manager) exitFile(id string) string { return m.stateDir(id) + "/" + exitrec.FileName }

// waitUnitGone polls until systemd has forgotten the unit or d passes.
func (m *Manager) waitUnitGone(ctx context.Context, unit string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		_, err := m.sd.UnitProperties(ctx, unit, "Unit")
		if errors.Is(err, errdefs.ErrNotFound) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops a running container: its stop signal, then SIGKILL to the
// whole unit after timeout seconds. Stopping a missing, created or exited
// container succeeds.
func (m *Manager) Stop(ctx context.Context, id string, timeout int64) error {
	c, err := m.get(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// One stop at a time per container (stopMu), but c.mu is not held
	// through the grace period: status and list read every container under
	// its c.mu (the kubelet's PLEG relist and housekeeping call them every
	// second), and a container that ignores its stop signal would stall
	// them node-wide for the whole grace period (node conformance: a 30 s
	// stall made the kubelet miss a mirror pod's recreation window).
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	c.mu.Lock()
	if c.rec == nil || c.rec.State != StateRunning {
		c.mu.Unlock()
		return nil
	}
	cid, unit := c.rec.ID, c.rec.Unit
	c.mu.Unlock()
	serr := m.stopUnit(ctx, unit, timeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.settleStopLocked(ctx, c, cid, serr)
}

// stopLocked stops a running container with c.mu held throughout (Remove,
// whose grace period is 0).
func (m *Manager) stopLocked(ctx context.Context, c *ctr, timeout int64) error {
	cid, unit := c.rec.ID, c.rec.Unit
	return m.settleStopLocked(ctx, c, cid, m.stopUnit(ctx, unit, timeout))
}

// stopUnit stops a container's unit within timeout seconds of grace. It
// touches no record and takes no lock.
func (m *Manager) stopUnit(ctx context.Context, unit string, timeout int64) error {
	if timeout < 0 {
		timeout = 0
	}
	grace := time.Duration(timeout) * time.Second
	// systemd cannot change TimeoutStopUSec of a running unit, so the CRI
	// timeout is enforced here: the stop job delivers KillSignal to the
	// init, and when the grace period is over KillUnit SIGKILLs the init.
	// Only the init: the unit's other processes may include ExecStopPost's
	// recorder (killing it would lose the exit status); the rest of the
	// container dies with its PID namespace, and KillMode=mixed SIGKILLs
	// whatever is left once the init is gone.
	sctx, cancel := context.WithTimeout(ctx, grace+m.opts.StopMargin)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.sd.StopUnit(sctx, unit) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(grace):
		kerr := m.sd.KillUnit(sctx, unit, int32(unix.SIGKILL), true)
		if kerr != nil && !errors.Is(kerr, errdefs.ErrNotFound) {
			// "no main process" once the init has exited: nothing to do.
			m.opts.Logger.Debug("kill container init after stop timeout", "unit", unit, "err", kerr)
		}
		err = <-done
	}
	if errors.Is(err, errdefs.ErrDeadline) {
		// The D-Bus layer bounds one job wait, and sctx may be spent by
		// now: give systemd one more margin (its own context) to finish
		// the stop; a slow ExecStopPost is still a stop.
		wctx, wcancel := context.WithTimeout(ctx, m.opts.StopMargin)
		if m.waitUnitGone(wctx, unit, m.opts.StopMargin) {
			err = nil
		}
		wcancel()
	}
	return err
}

// settleStopLocked records the outcome of stopUnit (err) for container cid.
// The record may have moved on meanwhile (a status read settled it, Remove
// removed it): only a record still RUNNING after a refresh is a failed stop.
func (m *Manager) settleStopLocked(ctx context.Context, c *ctr, cid string, err error) error {
	if err != nil && !systemd.IsJobError(err) {
		return fmt.Errorf("stop container %s: %w", cid, err)
	}
	m.refreshLocked(ctx, c, "")
	if c.rec != nil && c.rec.State == StateRunning {
		return fmt.Errorf("stop container %s: unit %s still active: %w", cid, c.rec.Unit, errdefs.ErrDeadline)
	}
	return nil
}

// refreshLocked resolves a RUNNING record against systemd: once the unit
// is gone (or inactive), the exit record written by ExecStopPost decides
// the exit code and reason. active is the unit's ActiveState when the
// caller already knows it ("" to ask systemd).
func (m *Manager) refreshLocked(ctx context.Context, c *ctr, active string) {
	r := c.rec
	if r == nil || r.State != StateRunning {
		return
	}
	state := active
	if active == "" {
		// ActiveState lives on the Unit interface, the exit details on
		// the Service one.
		p, err := m.sd.UnitProperties(ctx, r.Unit, "Unit", "ActiveState")
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			state = unitGoneState
		case err != nil:
			return // systemd unreachable: keep what we know
		default:
			state, _ = p["ActiveState"].(string)
		}
		if state == "active" && c.init.pid == 0 {
			// After a podunit restart: learn the init so that the next
			// status read needs no D-Bus call.
			m.captureInit(c)
		}
	}
	m.settleLocked(ctx, c, state, nil)
}

// lockCurrent looks container id up, locks it and brings its record up to
// date with refresh (refreshNowLocked, refreshStatusLocked, or a verbose
// read): what every read of or action on a container's current state
// starts with. A record removed while we waited for the lock is
// NotFound. On success the caller holds c.mu and unlocks it.
func (m *Manager) lockCurrent(ctx context.Context, id string, refresh func(context.Context, *ctr)) (*ctr, error) {
	c, err := m.get(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	refresh(ctx, c)
	if c.rec == nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

// refreshNowLocked is refreshLocked asking systemd for the unit's state.
func (m *Manager) refreshNowLocked(ctx context.Context, c *ctr) { m.refreshLocked(ctx, c, "") }

// unitGoneState stands for "systemd has no such unit" where an
// ActiveState is expected.
const unitGoneState = "gone"

// settleLocked moves a RUNNING record to EXITED unless state (the unit's
// ActiveState, or unitGoneState) says it still runs. svc, when the caller
// has them, are the unit's Service properties: the exit details systemd
// keeps for a loaded unit.
func (m *Manager) settleLocked(ctx context.Context, c *ctr, state string, svc map[string]any) {
	r := c.rec
	if r == nil || r.State != StateRunning {
		return
	}
	switch state {
	case "active", "activating", "deactivating", "reloading":
		return
	}
	rec, err := exitrec.Read(m.stateDir(r.ID))
	if err != nil && state != unitGoneState && svc == nil {
		// Inactive but still loaded and no record: ask systemd, also
		// whether it is still inactive. The state may be older than the
		// unit: a unit signal of a start attempt that failed reaches here
		// after Start's retry made the unit active again under the same
		// name (conformance CI of 67a48a7: a running container reported
		// EXITED 255).
		if p, perr := m.sd.UnitProperties(ctx, r.Unit, "Service", settleProps...); perr == nil {
			switch p["ActiveState"] {
			case "active", "activating", "deactivating", "reloading":
				return
			}
			svc = p
		}
	}
	m.flushLog(ctx, r)
	n := r.clone()
	n.State = StateExited
	switch {
	case err == nil:
		n.FinishedAt = rec.FinishedAt
		n.ExitCode = rec.Status()
		n.Reason = reason(n.ExitCode, rec.OOMKilled)
	case svc != nil && state != unitGoneState:
		n.FinishedAt = time.Now().UnixNano()
		n.ExitCode, n.Reason = fromUnitProps(svc)
	default:
		// Unit gone without a record: the recorder could not run (state
		// dir unwritable, podunit binary replaced). Say so, not "0".
		n.FinishedAt = time.Now().UnixNano()
		n.ExitCode, n.Reason = 255, ReasonUnknown
		n.Message = "container unit ended without an exit record"
	}
	if err := m.save(n); err != nil {
		m.opts.Logger.Warn("record container exit", "container", r.ID, "err", err)
	}
	c.rec = n
	c.init = initProc{}
	// Every running → exited transition passes here (a status read, a
	// stop, a unit signal, recovery), so STOPPED is published exactly once.
	m.publish(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, r.ID, r.PodID)
	m.pluginsStopped(ctx, n)
}

// flushLog waits, bounded, until the CRI log holds the container's last
// lines, so `kubectl logs` of an EXITED container is complete.
func (m *Manager) flushLog(ctx context.Context, r *record) {
	if m.logs == nil || r.LogPath == "" || ctx.Value(noLogFlush{}) != nil {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, m.opts.LogFlushTimeout)
	defer cancel()
	if err := m.logs.Flush(fctx, r.ID); err != nil {
		m.opts.Logger.Warn("container log may miss its last lines", "container", r.ID, "err", err)
	}
}

func reason(code int32, oom bool) string {
	switch {
	case oom:
		return ReasonOOMKilled
	case code == 0:
		return ReasonCompleted
	default:
		return ReasonError
	}
}

// exitProps are the Service properties fromUnitProps reads.
var exitProps = []string{"ExecMainCode", "ExecMainStatus", "Result"}

// settleProps are exitProps and the unit's current ActiveState.
var settleProps = append([]string{"ActiveState"}, exitProps...)

// fromUnitProps reads the exit of a unit systemd still has loaded.
func fromUnitProps(p map[string]any) (int32, string) {
	code, _ := p["ExecMainCode"].(int32)
	status, _ := p["ExecMainStatus"].(int32)
	result, _ := p["Result"].(string)
	var exit int32
	switch code {
	case 1: // CLD_EXITED
		exit = status
	case 2, 3: // CLD_KILLED, CLD_DUMPED
		exit = 128 + status
	default:
		exit = 255
	}
	return exit, reason(exit, result == "oom-kill")
}
