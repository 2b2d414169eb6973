package container

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"

	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/statefile"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// State is a container's lifecycle state as recorded on disk.
type State string

const (
	StateCreated State = "created"
	// StateRunning is recorded before the unit is started, so a crash in
	// between is resolved from systemd and the exit record on restart.
	StateRunning State = "running"
	StateExited  State = "exited"
)

// Reasons reported in ContainerStatus.reason.
const (
	ReasonCompleted  = "Completed"
	ReasonError      = "Error"
	ReasonOOMKilled  = "OOMKilled"
	ReasonStartError = "StartError"
	ReasonUnknown    = "Unknown"
)

// UnitPrefix starts every container unit's name.
const UnitPrefix = "podunit-ctr-"

// record is a container as persisted in <StateDir>/<id>/state.json.
type record struct {
	ID       string                        `json:"id"`
	PodID    string                        `json:"pod_id"`
	Metadata *runtimeapi.ContainerMetadata `json:"metadata"`
	Config   *runtimeapi.ContainerConfig   `json:"config"`
	// Pod identity for journal fields and the unit description.
	PodName      string `json:"pod_name"`
	PodNamespace string `json:"pod_namespace"`
	PodUID       string `json:"pod_uid"`

	Unit    string `json:"unit"`
	Slice   string `json:"slice"`
	Handler string `json:"handler"`

	ImageID     string   `json:"image_id"`
	ImageRef    string   `json:"image_ref"`
	ImageName   string   `json:"image_name"`
	RepoDigests []string `json:"repo_digests,omitempty"`
	// StopSignal is the signal number systemd sends on stop.
	StopSignal int       `json:"stop_signal"`
	User       *oci.User `json:"user,omitempty"`
	// LogPath is absolute: pod log directory + config log_path (the node's
	// log relay writes there; empty when the kubelet asked for none).
	LogPath string `json:"log_path,omitempty"`
	// Resources are the current limits, updated by UpdateResources.
	Resources *runtimeapi.LinuxContainerResources `json:"resources,omitempty"`

	// Restore: created from a checkpoint archive (extracted in
	// restoreDir): the unit restores it instead of creating and starting.
	Restore bool `json:"restore,omitempty"`

	State      State  `json:"state"`
	CreatedAt  int64  `json:"created_at"`
	StartedAt  int64  `json:"started_at,omitempty"`
	FinishedAt int64  `json:"finished_at,omitempty"`
	ExitCode   int32  `json:"exit_code,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Message    string `json:"message,omitempty"`
}

func newID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux ≥ 3.17
	}
	return hex.EncodeToString(b[:])
}

func unitName(id string) string { return UnitPrefix + id + ".service" }

// Paths of one container.
func (m *Manager) stateDir(id string) string  { return filepath.Join(m.opts.StateDir, id) }
func (m *Manager) stateFile(id string) string { return filepath.Join(m.stateDir(id), "state.json") }
func (m *Manager) runDir(id string) string    { return filepath.Join(m.opts.RunDir, id) }
func (m *Manager) bundleDir(id string) string { return filepath.Join(m.runDir(id), "bundle") }
func (m *Manager) pidFile(id string) string   { return filepath.Join(m.runDir(id), "pid") }

func (m *Manager) save(r *record) error { return statefile.Write(m.stateFile(r.ID), r) }

// clone returns a copy safe to hand out of the container's lock.
func (r *record) clone() *record {
	c := *r
	return &c
}
