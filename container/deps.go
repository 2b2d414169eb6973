// Package container is podunit's container manager. A container is a
// transient systemd service (podunit-ctr-<id>.service) in its pod's slice
// whose main process is the container's init, started by an OCI runtime
// from a bundle this package writes. systemd supervises it, applies its
// limits, stops it and keeps its exit status (via the ExecStopPost
// recorder), so there is no per-container monitor process and podunit can
// restart at any time without touching running containers.
package container

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage/pkg/archive"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/events"
	"github.com/podunit/podunit/imagestore"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/unitprops"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageStore is what the manager needs from imagestore.Store.
type ImageStore interface {
	Resolve(ctx context.Context, ref string) (*imagestore.ImageInfo, error)
	CreateContainerRootfs(ctx context.Context, containerID, imageRef, name string, idmap *imagestore.IDMap) error
	MountRootfs(ctx context.Context, containerID string) (string, error)
	// UnmountRootfs unmounts the root filesystem and the container's
	// image volumes: after it no storage mount of the container is left.
	UnmountRootfs(ctx context.Context, containerID string) error
	// DeleteRootfs and DeleteImageVolumes unmount what is still mounted
	// (Remove leaves that to the reaper) and succeed on what is already
	// gone: the reaper and the start-up gc may race for the same ID.
	DeleteRootfs(ctx context.Context, containerID string) error
	// RootfsChanges is what the container changed in its writable layer
	// (a checkpoint's rootfs diff).
	RootfsChanges(ctx context.Context, containerID string) ([]archive.Change, error)
	// Image volumes (CRI Mount.image): an image mounted read-only for a
	// container, bind-mounted into it.
	MountImageVolume(ctx context.Context, containerID, imageRef string) (string, error)
	UnmountImageVolumes(ctx context.Context, containerID string) error
	DeleteImageVolumes(ctx context.Context, containerID string) error
}

var _ ImageStore = (*imagestore.Store)(nil)

// Pod is what a container needs to know about its sandbox.
type Pod struct {
	ID     string
	Config *runtimeapi.PodSandboxConfig
	// Slice is the pod's slice unit name (not the path form).
	Slice string
	// Pinned namespace files; empty means host or private as the config says.
	NetNSPath, IPCNSPath, UTSNSPath, PIDNSPath string
	// UserNSPath is the pod's user namespace; empty: the host's.
	UserNSPath                              string
	ResolvConfPath, HostsPath, HostnamePath string
	ShmPath                                 string
	LogDirectory                            string
	RuntimeHandler                          string
}

// Pods looks sandboxes up; sandbox.Manager behind an adapter.
type Pods interface {
	Pod(ctx context.Context, id string) (*Pod, error)
}

// Logs is the CRI log writer (the node's log relay, logrelay.Client),
// which the unit's wrapper hands the container's log_path to.
type Logs interface {
	// Flush returns once the container's output is all in its log file.
	Flush(ctx context.Context, containerID string) error
}

// Options configure the manager.
type Options struct {
	// StateDir holds one directory per container (record, exit status);
	// it must survive podunit restarts.
	StateDir string
	// RunDir holds bundles and pid files.
	RunDir string
	// MountNS is the pin of the private mount namespace podunit runs in
	// (mountns.Pin, runtime.private_mount_namespace): the units' commands
	// enter it, and bidirectional mounts are cloned from the host's
	// namespace into it. Empty: podunit mounts in the host's namespace.
	MountNS string
	// Self is the podunit binary.
	Self string
	// UnitHelper is what the unit's ExecStart/ExecStopPost run as
	// `UnitHelper _stdio` and `UnitHelper _exitrec` (UnitHelper(Self));
	// empty means Self.
	UnitHelper string
	// LogRelaySocket is the node's log relay (package logrelay) that moves
	// container output from pipes to journald; empty relays from inside
	// each unit instead (cut output is possible when a container exits).
	LogRelaySocket string
	// NoJournal keeps container output out of journald (config
	// logs.journald = false): the relay writes only the CRI log file.
	NoJournal bool
	// JournalRateLimit is journald's limit on each container's lines
	// (logs.journald_rate_limit_*).
	JournalRateLimit unitprops.RateLimit
	// DefaultHandler is used when the pod names no runtime handler
	// (runtime.default_handler); it must be one of Deps.Runtimes.
	DefaultHandler string
	// Caps describes systemd and cgroups for the unit properties.
	Caps unitprops.Caps
	// Host facts for spec generation (capabilities, OOM score floor...).
	Host oci.Host
	// CDI resolves the CDI devices a container requests (SetCDI); nil
	// when [cdi] is disabled, and then such a request is refused.
	CDI *oci.CDIRegistry
	// DefaultCapabilities, Rlimits and SeccompDefault are the operator's
	// defaults for every new container (runtime.default_capabilities,
	// default_ulimits, seccomp_profile; SetRuntime).
	DefaultCapabilities []string
	Rlimits             []specs.POSIXRlimit
	SeccompDefault      []byte
	// CgroupRoot is where cgroup hierarchies are mounted (OOM counters).
	CgroupRoot string
	// NoHugetlb drops hugepage limits from specs: the runtime has no
	// hugetlb cgroup to apply them (DetectHugetlb), and the kubelet sends
	// them for every container.
	NoHugetlb bool
	// StartTimeout bounds the start job (runtime create + start).
	StartTimeout time.Duration
	// StopMargin is how long past a stop's own timeout the job may take.
	StopMargin time.Duration
	// ExecOutputMax caps ExecSync's stdout and stderr each.
	ExecOutputMax int
	// LogFlushTimeout bounds waiting for a finished container's last log
	// lines before it is reported EXITED.
	LogFlushTimeout time.Duration
	Logger          *slog.Logger

	// reapQueue bounds the deferred removals' queue (reaper.go); 0 is
	// defaultReapQueue. Tests make it small.
	reapQueue int
}

// Deps are the manager's collaborators.
type Deps struct {
	Systemd  systemd.Conn
	Images   ImageStore
	Pods     Pods
	Runtimes map[string]oci.Runtime
	// Features are what each of Runtimes supports (ProbeFeatures at start;
	// SetRuntimes probes the handlers a reload adds or changes); a handler
	// without an entry supports nothing optional.
	Features map[string]oci.Features
	// Logs writes CRI log files; nil means none are written (tests).
	Logs Logs
	// Events receives the container lifecycle events for the CRI's
	// GetContainerEvents; nil means none are published.
	Events Publisher
	// Plugins see and adjust the container lifecycle (NRI); nil: none.
	Plugins Plugins
}

// Publisher takes container events (events.Hub); it must never block.
type Publisher interface {
	Publish(events.Event)
}

// check rejects options a caller left out: their defaults live in
// config.Default() (see OptionsFromConfig).
func (o *Options) check() error {
	if o.StateDir == "" || o.RunDir == "" || o.Self == "" || o.CgroupRoot == "" || o.DefaultHandler == "" {
		return fmt.Errorf("container manager: StateDir, RunDir, Self, CgroupRoot and DefaultHandler are required: %w", errdefs.ErrInvalid)
	}
	if o.StartTimeout <= 0 || o.StopMargin <= 0 || o.LogFlushTimeout <= 0 || o.ExecOutputMax <= 0 {
		return fmt.Errorf("container manager: StartTimeout, StopMargin, LogFlushTimeout and ExecOutputMax are required: %w", errdefs.ErrInvalid)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}
