package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/rawfile"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var criState = map[State]runtimeapi.ContainerState{
	StateCreated: runtimeapi.ContainerState_CONTAINER_CREATED,
	StateRunning: runtimeapi.ContainerState_CONTAINER_RUNNING,
	StateExited:  runtimeapi.ContainerState_CONTAINER_EXITED,
}

// imageSpec is the image a container's status and listing report. Its name
// is what the pod spec said (user_specified_image, sent by kubelets since
// 1.30), not the image ID the kubelet resolved that to and created the
// container with: the kubelet copies it into the pod's status, where users
// and the node conformance suite's image-update specs compare it with the
// spec (containerd reports a repo tag there, CRI-O the user's name).
func (r *record) imageSpec() *runtimeapi.ImageSpec {
	name := r.ImageName
	if u := r.Config.GetImage().GetUserSpecifiedImage(); u != "" {
		name = u
	}
	spec := &runtimeapi.ImageSpec{Image: name}
	if img := r.Config.GetImage(); img != nil {
		spec.Annotations = img.GetAnnotations()
		spec.UserSpecifiedImage = img.GetUserSpecifiedImage()
		spec.RuntimeHandler = img.GetRuntimeHandler()
	}
	return spec
}

func (r *record) criStatus() *runtimeapi.ContainerStatus {
	st := &runtimeapi.ContainerStatus{
		Id:          r.ID,
		Metadata:    r.Metadata,
		State:       criState[r.State],
		CreatedAt:   r.CreatedAt,
		StartedAt:   r.StartedAt,
		FinishedAt:  r.FinishedAt,
		ExitCode:    r.ExitCode,
		Image:       r.imageSpec(),
		ImageRef:    r.ImageRef,
		ImageId:     r.ImageID,
		Reason:      r.Reason,
		Message:     r.Message,
		Labels:      r.Config.GetLabels(),
		Annotations: r.Config.GetAnnotations(),
		Mounts:      r.Config.GetMounts(),
		LogPath:     r.LogPath,
		StopSignal:  r.Config.GetStopSignal(),
	}
	if r.Resources != nil {
		st.Resources = &runtimeapi.ContainerResources{Linux: r.Resources}
	}
	if u := r.User; u != nil {
		lu := &runtimeapi.LinuxContainerUser{Uid: int64(u.UID), Gid: int64(u.GID)}
		for _, g := range u.AdditionalGids {
			lu.SupplementalGroups = append(lu.SupplementalGroups, int64(g))
		}
		st.User = &runtimeapi.ContainerUser{Linux: lu}
	}
	return st
}

func (r *record) criContainer() *runtimeapi.Container {
	return &runtimeapi.Container{
		Id:           r.ID,
		PodSandboxId: r.PodID,
		Metadata:     r.Metadata,
		Image:        r.imageSpec(),
		ImageRef:     r.ImageRef,
		ImageId:      r.ImageID,
		State:        criState[r.State],
		CreatedAt:    r.CreatedAt,
		Labels:       r.Config.GetLabels(),
		Annotations:  r.Config.GetAnnotations(),
	}
}

// Status reports a container, resolving a finished unit into EXITED with
// its recorded exit code. verbose adds "info": unit, main PID, bundle and
// OCI spec as JSON.
//
// A running container whose init provably still runs is answered without
// systemd (fastpath.go), verbose or not: the verbose info then gives the
// init's PID from that evidence. Otherwise the verbose form asks systemd
// once, for the unit's state and exit, and resolves the state from the
// same answer (the info then also has the unit's active and sub state).
func (m *Manager) Status(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatus, map[string]string, error) {
	var (
		unit    map[string]any
		initPID int
	)
	refresh := m.refreshStatusLocked
	if verbose {
		refresh = func(ctx context.Context, c *ctr) {
			// A kubelet, critest and crictl inspect ask for the verbose
			// form; a D-Bus round trip for each was most of its cost.
			if m.initRunning(c) {
				initPID = c.init.pid
				return
			}
			unit = m.refreshVerboseLocked(ctx, c)
		}
	}
	c, err := m.lockCurrent(ctx, id, refresh)
	if err != nil {
		return nil, nil, err
	}
	r := c.rec
	c.mu.Unlock()
	st := r.criStatus()
	if rt, err := m.runtime(r.Handler); err == nil && r.Resources != nil {
		st.Resources = &runtimeapi.ContainerResources{Linux: m.inForce(rt, r.Resources)}
	}
	if !verbose {
		return st, nil, nil
	}
	info := statusInfo{
		ID: r.ID, SandboxID: r.PodID, Unit: r.Unit, Slice: r.Slice,
		RuntimeHandler: r.Handler, Bundle: m.bundleDir(r.ID), State: r.State,
	}
	switch {
	case r.State != StateRunning:
	case initPID != 0:
		info.PID = initPID
	case unit != nil:
		info.PID = unit["MainPID"]
		info.ActiveState = unit["ActiveState"]
		info.SubState = unit["SubState"]
	}
	b, err := json.Marshal(info)
	if err != nil {
		return nil, nil, fmt.Errorf("container %s: verbose info: %w", id, err)
	}
	b = withRuntimeSpec(b, m.bundleDir(r.ID)+"/config.json")
	return st, map[string]string{"info": string(b)}, nil
}

// statusInfo is a verbose ContainerStatus's "info" (crictl inspect
// shows it), runtimeSpec aside.
type statusInfo struct {
	ID             string `json:"id"`
	SandboxID      string `json:"sandboxID"`
	Unit           string `json:"unit"`
	Slice          string `json:"slice"`
	RuntimeHandler string `json:"runtimeHandler"`
	Bundle         string `json:"bundle"`
	State          State  `json:"state"`
	// From the init's evidence (an int) or the unit's properties.
	PID         any `json:"pid,omitempty"`
	ActiveState any `json:"activeState,omitempty"`
	SubState    any `json:"subState,omitempty"`
}

// withRuntimeSpec appends the bundle's config.json to info's JSON object
// as "runtimeSpec", as read: encoding/json would re-validate and compact
// the spec (a json.RawMessage), the largest cost of a verbose status on
// fakes (BenchmarkVerboseStatus). The file is podunit's own, written
// whole by statefile.Write; one that is missing or is not a JSON object
// is left out.
func withRuntimeSpec(info []byte, path string) []byte {
	spec, err := rawfile.Read(path, specMax)
	spec = bytes.TrimSpace(spec)
	if err != nil || len(spec) < 2 || spec[0] != '{' || spec[len(spec)-1] != '}' || len(info) < 2 {
		return info
	}
	out := make([]byte, 0, len(info)+len(spec)+16)
	out = append(out, info[:len(info)-1]...)
	out = append(out, `,"runtimeSpec":`...)
	out = append(out, spec...)
	return append(out, '}')
}

// specMax bounds the config.json a verbose status shows; podunit's are a
// few KiB.
const specMax = 4 << 20

// verboseProps are the unit properties a verbose status uses: its info
// (pid, activeState, subState) and an exit systemd still holds
// (fromUnitProps). Named, they are a few small reads instead of every
// property of the service (systemd.Conn.UnitProperties).
var verboseProps = append([]string{"ActiveState", "SubState", "MainPID"}, exitProps...)

// refreshVerboseLocked resolves a RUNNING record from one read of the
// unit's verboseProps (Unit and Service interfaces) and returns them for
// the verbose info; nil when the container does not run or systemd did not
// answer.
func (m *Manager) refreshVerboseLocked(ctx context.Context, c *ctr) map[string]any {
	r := c.rec
	if r == nil || r.State != StateRunning {
		return nil
	}
	p, err := m.sd.UnitProperties(ctx, r.Unit, "Service", verboseProps...)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		m.settleLocked(ctx, c, unitGoneState, nil)
		return nil
	case err != nil:
		return nil // systemd unreachable: keep what we know
	}
	state, _ := p["ActiveState"].(string)
	if state == "active" && c.init.pid == 0 {
		m.captureInit(c)
	}
	m.settleLocked(ctx, c, state, p)
	return p
}

// snapshot returns the current containers, refreshing running ones whose
// unit is no longer active with one ListUnits call for all of them.
func (m *Manager) snapshot(ctx context.Context) []*record {
	m.mu.RLock()
	cs := make([]*ctr, 0, len(m.ctrs))
	for _, c := range m.ctrs {
		cs = append(cs, c)
	}
	m.mu.RUnlock()
	active := map[string]string{}
	listed := false
	if units, err := m.sd.ListUnits(ctx, UnitPrefix+"*.service"); err == nil {
		listed = true
		for _, u := range units {
			active[u.Name] = u.ActiveState
		}
	}
	out := make([]*record, 0, len(cs))
	for _, c := range cs {
		c.mu.Lock()
		if r := c.rec; r != nil && r.State == StateRunning && listed {
			switch active[r.Unit] {
			case "active", "activating", "deactivating", "reloading":
			default:
				// Ask about this one unit: the listing may predate a
				// concurrent start.
				m.refreshLocked(ctx, c, "")
			}
		}
		if c.rec != nil {
			out = append(out, c.rec)
		}
		c.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	return out
}

// List returns the containers matching f (nil matches all).
func (m *Manager) List(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	var out []*runtimeapi.Container
	for _, r := range m.snapshot(ctx) {
		if matches(r, f) {
			out = append(out, r.criContainer())
		}
	}
	return out, nil
}

func matches(r *record, f *runtimeapi.ContainerFilter) bool {
	if f == nil {
		return true
	}
	if f.GetId() != "" && !strings.HasPrefix(r.ID, f.GetId()) {
		return false
	}
	if f.GetPodSandboxId() != "" && !strings.HasPrefix(r.PodID, f.GetPodSandboxId()) {
		return false
	}
	if f.GetState() != nil && criState[r.State] != f.GetState().GetState() {
		return false
	}
	labels := r.Config.GetLabels()
	for k, v := range f.GetLabelSelector() {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// PodContainers returns the IDs of pod podID's containers.
func (m *Manager) PodContainers(podID string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var ids []string
	for id, c := range m.ctrs {
		if c.podID == podID {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}
