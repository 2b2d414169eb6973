// Package sandbox manages pod sandboxes the systemd-native way: a pod is a
// slice, its user, network, IPC and UTS namespaces are pinned files rather
// than an infra process, and its network comes from CNI. Only a pod that shares
// one PID namespace gets a process of its own, a tiny init in a transient
// service.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/idindex"
	"github.com/podunit/podunit/network"
	"github.com/podunit/podunit/podfiles"
	"github.com/podunit/podunit/statefile"
	"github.com/podunit/podunit/systemd"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// State is a sandbox's CRI state.
type State string

const (
	StateReady    State = "ready"
	StateNotReady State = "notready"
)

// Sandbox is a pod as the rest of podunit sees it. Namespace paths are empty
// when the pod uses the host's namespace (or, for PID, when containers do
// not share one). Treat it as read-only: Get and List return copies.
type Sandbox struct {
	ID             string                       `json:"id"`
	Config         *runtimeapi.PodSandboxConfig `json:"-"`
	RuntimeHandler string                       `json:"runtimeHandler"`
	CreatedAt      time.Time                    `json:"createdAt"`
	State          State                        `json:"state"`

	// Slice is the leaf slice name; CgroupParent its cgroup path.
	Slice        string `json:"slice"`
	CgroupParent string `json:"cgroupParent"`
	// OwnSlice: podunit created the slice and removes it with the pod.
	OwnSlice bool `json:"ownSlice"`

	NetNSPath string `json:"netns,omitempty"`
	IPCNSPath string `json:"ipcns,omitempty"`
	UTSNSPath string `json:"utsns,omitempty"`
	PIDNSPath string `json:"pidns,omitempty"`
	// UserNSPath pins the pod's user namespace (userns_options mode POD),
	// which owns its network, IPC and UTS namespaces; empty: the host's.
	UserNSPath string `json:"userns,omitempty"`
	// InitUnit holds the shared PID namespace; empty without one.
	InitUnit string `json:"initUnit,omitempty"`

	Hostname       string `json:"hostname,omitempty"`
	ResolvConfPath string `json:"resolvConf"`
	HostsPath      string `json:"hosts"`
	HostnamePath   string `json:"hostnameFile"`
	// ShmPath is a per-pod tmpfs for /dev/shm; empty with hostIPC.
	ShmPath      string `json:"shm,omitempty"`
	LogDirectory string `json:"logDirectory,omitempty"`

	// IPs are the pod IPs, primary first; empty with the host network.
	IPs       []string        `json:"ips,omitempty"`
	Network   string          `json:"network,omitempty"`
	CNIResult json.RawMessage `json:"cniResult,omitempty"`
	// NetworkUp: CNI ADD succeeded and no DEL has succeeded since.
	NetworkUp bool `json:"networkUp,omitempty"`
}

// HostNetwork reports whether the pod uses the node's network namespace.
func (s *Sandbox) HostNetwork() bool { return s.NetNSPath == "" }

func (s *Sandbox) clone() *Sandbox {
	c := *s
	if s.Config != nil {
		c.Config = proto.Clone(s.Config).(*runtimeapi.PodSandboxConfig)
	}
	c.IPs = slices.Clone(s.IPs)
	c.CNIResult = slices.Clone(s.CNIResult)
	return &c
}

// phase of a record on disk: a "creating" record found at start-up is a
// sandbox that never finished and is rolled back.
type phase string

const (
	phaseCreating phase = "creating"
	phaseCreated  phase = "created"
)

// record is the on-disk form: the sandbox plus its config in protojson
// (the CRI types are protobuf messages, not plain structs).
type record struct {
	Sandbox
	Phase  phase           `json:"phase"`
	Config json.RawMessage `json:"config"`
}

// Options configure a Manager.
type Options struct {
	StateDir string // sandboxes/<id>.json below it
	RunDir   string // namespace pins and pod files below it
	// Network attaches pods; nil means CNI from CNIConfDir and CNIBinDirs.
	Network     network.Plugin
	CNIConfDir  string
	CNIBinDirs  []string
	CNICacheDir string
	// ParentSlice holds the slices podunit creates for pods without a
	// cgroup_parent (systemd.parent_slice).
	ParentSlice string
	// Handlers are the runtime handlers besides "" (the default).
	Handlers []string
	Systemd  systemd.Conn
	Logger   *slog.Logger
	// PodInit is the command of the unit that holds a shared PID
	// namespace; it must create the namespace and run an init inside.
	PodInit []string
	// MountNS is the pin of the private mount namespace podunit runs in
	// (mountns.Pin): the pod init's unit enters it, where the namespace
	// pins it names are mounted. Empty: none.
	MountNS string
	// HostResolvConf and HostHosts feed pods without DNS config and
	// host-network pods; defaults /etc/resolv.conf and /etc/hosts. A
	// missing HostHosts gives host-network pods the loopback entries only.
	HostResolvConf string
	HostHosts      string
	// ShmSize is the size of each pod's /dev/shm tmpfs; default 64 MiB.
	ShmSize int64
	// OpTimeout bounds each cleanup step run after the caller's context
	// is gone (rollback): systemd.call_timeout, the bound of each step.
	OpTimeout time.Duration
	// Plugins see pods come and go (NRI); nil means none.
	Plugins Plugins
	// CgroupRoot is where the cgroup hierarchies are mounted: a removed
	// pod's slice is cleared from the v1 hierarchies systemd leaves alone.
	CgroupRoot string
}

// Plugins are the node's NRI plugins (package nri). A failing
// RunPodSandbox fails the pod's creation; the stop and remove hooks run
// once per pod, when it stops being ready and when it goes.
type Plugins interface {
	// BlockSync holds off registering a new plugin until unblock is
	// called, so a pod being created is in its synchronization or
	// reaches it as an event.
	BlockSync() (unblock func())
	RunPodSandbox(ctx context.Context, sb *Sandbox) error
	StopPodSandbox(ctx context.Context, sb *Sandbox) error
	RemovePodSandbox(ctx context.Context, sb *Sandbox) error
}

// DefaultPodInit runs catatonit as PID 1 of a new PID namespace.
var DefaultPodInit = []string{"/usr/bin/unshare", "--pid", "--fork", "--kill-child", "/usr/bin/catatonit", "-P"}

// Manager owns every pod sandbox.
type Manager struct {
	opts Options // Handlers is as started: handlers holds the current ones
	log  *slog.Logger
	net  network.Plugin
	// handlers are the runtime handlers a pod may name; a reload of
	// runtime.handlers replaces them (SetHandlers).
	handlers atomic.Pointer[[]string]

	mu    sync.Mutex
	pods  map[string]*entry
	names map[string]string // reserved name key -> id
}

type entry struct {
	mu sync.Mutex // serialises Stop/Remove/Update of one pod
	sb *Sandbox
	// snap is the last published state. Get and List read it without
	// taking mu: a Stop or Remove holds mu across CNI DEL and systemd
	// jobs (seconds each at worst), and the kubelet's relist, pod status
	// and every container create look pods up meanwhile.
	snap atomic.Pointer[Sandbox]
}

func newEntry(sb *Sandbox) *entry {
	e := &entry{sb: sb}
	e.snap.Store(sb.clone())
	return e
}

// release publishes the entry's state and unlocks it.
func (e *entry) release() {
	if e.sb != nil {
		e.snap.Store(e.sb.clone())
	}
	e.mu.Unlock()
}

// New validates opts and returns a Manager; call Recover before serving.
func New(opts Options) (*Manager, error) {
	if opts.StateDir == "" || opts.RunDir == "" || opts.CgroupRoot == "" {
		return nil, fmt.Errorf("sandbox: state dir, run dir and cgroup root are required: %w", errdefs.ErrInvalid)
	}
	if opts.Systemd == nil {
		return nil, fmt.Errorf("sandbox: systemd connection is required: %w", errdefs.ErrInvalid)
	}
	if _, err := systemd.SliceName(opts.ParentSlice); err != nil {
		return nil, fmt.Errorf("sandbox: parent slice: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if len(opts.PodInit) == 0 {
		opts.PodInit = DefaultPodInit
	}
	if opts.HostResolvConf == "" {
		opts.HostResolvConf = podfiles.HostResolvConf
	}
	if opts.HostHosts == "" {
		opts.HostHosts = podfiles.HostHosts
	}
	if opts.ShmSize <= 0 {
		opts.ShmSize = defaultShmBytes
	}
	if opts.OpTimeout <= 0 {
		return nil, fmt.Errorf("sandbox: cleanup timeout is required: %w", errdefs.ErrInvalid)
	}
	if opts.Network == nil && opts.CNIConfDir == "" {
		return nil, fmt.Errorf("sandbox: a network plugin or a CNI configuration directory is required: %w", errdefs.ErrInvalid)
	}
	m := &Manager{opts: opts, log: opts.Logger, net: opts.Network, pods: map[string]*entry{}, names: map[string]string{}}
	m.SetHandlers(opts.Handlers)
	if m.net == nil {
		m.net = network.NewCNI(network.Options{ConfDir: opts.CNIConfDir, BinDirs: opts.CNIBinDirs, CacheDir: opts.CNICacheDir})
	}
	return m, nil
}

// SetHandlers replaces the runtime handlers pods may name from now on; pods
// that exist keep the handler they were created with.
func (m *Manager) SetHandlers(names []string) {
	h := slices.Clone(names)
	m.handlers.Store(&h)
}

// NetworkReady reports whether pods can get a network (for Status).
func (m *Manager) NetworkReady(ctx context.Context) error { return m.net.Ready(ctx) }

// Get returns a copy of the sandbox; ErrNotFound if there is none.
func (m *Manager) Get(ctx context.Context, id string) (*Sandbox, error) {
	m.mu.Lock()
	e, ok := m.pods[id]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("pod sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return e.snap.Load().clone(), nil
}

// List returns copies of all sandboxes, oldest first.
func (m *Manager) List(ctx context.Context) []*Sandbox {
	m.mu.Lock()
	es := make([]*entry, 0, len(m.pods))
	for _, e := range m.pods {
		es = append(es, e)
	}
	m.mu.Unlock()
	out := make([]*Sandbox, 0, len(es))
	for _, e := range es {
		out = append(out, e.snap.Load().clone())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Resolve turns a request's pod ID (the full ID or a unique prefix, see
// package idindex) into the full ID.
func (m *Manager) Resolve(ref string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return idindex.Resolve("pod sandbox", ref, m.pods)
}

func newID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// nameKey identifies a pod by the metadata the kubelet may not reuse while
// a sandbox with it exists.
func nameKey(md *runtimeapi.PodSandboxMetadata) string {
	return fmt.Sprintf("%s_%s_%s_%d", md.GetName(), md.GetNamespace(), md.GetUid(), md.GetAttempt())
}

func (m *Manager) statePath(id string) string {
	return filepath.Join(m.opts.StateDir, "sandboxes", id+".json")
}

func (m *Manager) podDir(id string) string { return filepath.Join(m.opts.RunDir, "sandboxes", id) }

func (m *Manager) pinPath(kind, id string) string {
	return filepath.Join(m.opts.RunDir, kind+"ns", id)
}

func (m *Manager) save(sb *Sandbox, ph phase) error {
	cfg, err := protojson.Marshal(sb.Config)
	if err != nil {
		return fmt.Errorf("encode pod config: %w", err)
	}
	return statefile.Write(m.statePath(sb.ID), &record{Sandbox: *sb, Phase: ph, Config: cfg})
}

func (m *Manager) load(path string) (*Sandbox, phase, error) {
	var r record
	if err := statefile.Read(path, &r); err != nil {
		return nil, "", err
	}
	sb := r.Sandbox
	sb.Config = &runtimeapi.PodSandboxConfig{}
	if len(r.Config) > 0 {
		if err := protojson.Unmarshal(r.Config, sb.Config); err != nil {
			return nil, "", fmt.Errorf("decode pod config in %s: %w", path, err)
		}
	}
	return &sb, r.Phase, nil
}

// cleanupContext is for undo steps that must run even when the caller's
// context is already cancelled.
func (m *Manager) cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), m.opts.OpTimeout)
}
