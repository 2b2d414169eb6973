package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/netns"
	"github.com/podunit/podunit/network"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/podfiles"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/unitcgroup"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// plan is everything Run derives from the request before touching the host,
// so that an invalid request changes nothing.
type plan struct {
	hostNet, hostIPC, sharedPID bool
	// uids and gids map the pod's own user namespace; nil: the host's.
	uids, gids []specs.LinuxIDMapping
	sysctls    map[podfiles.Namespace]map[string]string
	resolv     []byte
	bandwidth  *network.Bandwidth
	ports      []network.PortMapping
	slice      string
	ownSlice   bool
	resources  *runtimeapi.LinuxContainerResources
}

func (m *Manager) validate(cfg *runtimeapi.PodSandboxConfig, handler string) (*plan, error) {
	md := cfg.GetMetadata()
	if md == nil || md.GetName() == "" || md.GetNamespace() == "" {
		return nil, fmt.Errorf("pod sandbox metadata needs name and namespace: %w", errdefs.ErrInvalid)
	}
	if handler != "" && !slices.Contains(*m.handlers.Load(), handler) {
		return nil, fmt.Errorf("runtime handler %q is not configured: %w", handler, errdefs.ErrInvalid)
	}
	nso := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	p := &plan{
		hostNet:   nso.GetNetwork() == runtimeapi.NamespaceMode_NODE,
		hostIPC:   nso.GetIpc() == runtimeapi.NamespaceMode_NODE,
		sharedPID: nso.GetPid() == runtimeapi.NamespaceMode_POD,
		resources: cfg.GetLinux().GetResources(),
	}
	var err error
	if p.uids, p.gids, err = oci.UserNamespaceMappings(nso.GetUsernsOptions()); err != nil {
		return nil, err
	}
	if p.uids != nil && (p.hostNet || p.hostIPC || nso.GetPid() == runtimeapi.NamespaceMode_NODE) {
		// The kubelet refuses hostUsers: false with any host namespace
		// too: the host's namespaces belong to the host's user namespace,
		// where the pod's root is nobody.
		return nil, fmt.Errorf("userns_options: a pod in its own user namespace cannot use the host's network, IPC or PID namespace: %w", errdefs.ErrInvalid)
	}
	if !p.hostNet && cfg.GetHostname() != "" {
		if err := podfiles.ValidHostname(cfg.GetHostname()); err != nil {
			return nil, err
		}
	}
	if p.sysctls, err = podfiles.Classify(cfg.GetLinux().GetSysctls(), p.hostNet, p.hostIPC); err != nil {
		return nil, err
	}
	if p.resolv, err = podfiles.ResolvConf(cfg.GetDnsConfig(), m.opts.HostResolvConf); err != nil {
		return nil, err
	}
	if p.bandwidth, err = network.BandwidthFromAnnotations(cfg.GetAnnotations()); err != nil {
		return nil, err
	}
	for _, pm := range cfg.GetPortMappings() {
		if pm.GetContainerPort() <= 0 || pm.GetContainerPort() > 65535 || pm.GetHostPort() < 0 || pm.GetHostPort() > 65535 {
			return nil, fmt.Errorf("port mapping %v: %w", pm, errdefs.ErrInvalid)
		}
		p.ports = append(p.ports, network.PortMapping{
			HostPort:      pm.GetHostPort(),
			ContainerPort: pm.GetContainerPort(),
			Protocol:      strings.ToLower(pm.GetProtocol().String()),
			HostIP:        pm.GetHostIp(),
		})
	}
	if parent := cfg.GetLinux().GetCgroupParent(); parent != "" {
		if p.slice, err = systemd.SliceName(parent); err != nil {
			return nil, err
		}
	} else {
		p.ownSlice = true
	}
	return p, nil
}

// Run creates a pod sandbox and returns its ID. On any failure everything
// created so far is undone.
func (m *Manager) Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (_ string, retErr error) {
	p, err := m.validate(cfg, handler)
	if err != nil {
		return "", err
	}
	id := newID()
	key := nameKey(cfg.GetMetadata())
	m.mu.Lock()
	if other, ok := m.names[key]; ok {
		m.mu.Unlock()
		return "", fmt.Errorf("pod sandbox name %q is reserved for %s: %w", key, other, errdefs.ErrExists)
	}
	m.names[key] = id
	m.mu.Unlock()
	log := m.log.With("pod", id, "name", cfg.GetMetadata().GetName(), "namespace", cfg.GetMetadata().GetNamespace())

	// The request is the caller's; the sandbox keeps its own copy.
	cfg = proto.Clone(cfg).(*runtimeapi.PodSandboxConfig)
	sb := m.newSandbox(id, cfg, handler, p)
	defer func() {
		if retErr == nil {
			return
		}
		cctx, cancel := m.cleanupContext()
		defer cancel()
		if err := m.teardown(cctx, sb); err != nil {
			log.Error("rollback of failed pod sandbox left debris", "err", err)
		}
		m.mu.Lock()
		delete(m.names, key)
		m.mu.Unlock()
	}()
	// The record goes to disk before anything exists on the host, so a
	// crash from here on leaves a "creating" record that Recover undoes.
	if err := m.save(sb, phaseCreating); err != nil {
		return "", err
	}
	if err := m.setupSlice(ctx, sb, p); err != nil {
		return "", err
	}
	if err := m.setupNamespaces(sb, p); err != nil {
		return "", err
	}
	if !p.hostNet {
		req := m.netRequest(sb)
		req.PortMappings, req.Bandwidth = p.ports, p.bandwidth
		// Marked before ADD: a half-done ADD must be DELeted on rollback.
		sb.NetworkUp = true
		res, err := m.net.Setup(ctx, req)
		if err != nil {
			return "", fmt.Errorf("pod network: %w", err)
		}
		sb.IPs, sb.Network, sb.CNIResult = res.IPs, res.Network, res.Raw
	}
	if err := m.writePodFiles(sb, p); err != nil {
		return "", err
	}
	if cfg.GetLogDirectory() != "" {
		if err := os.MkdirAll(cfg.GetLogDirectory(), 0o755); err != nil {
			return "", fmt.Errorf("pod log directory: %w", err)
		}
	}
	if p.sharedPID {
		if err := m.startInit(ctx, sb); err != nil {
			return "", err
		}
	}
	if pl := m.opts.Plugins; pl != nil {
		// Until the hook returns the pod is neither listed nor usable;
		// a plugin's refusal rolls it back like any failed step.
		unblock := pl.BlockSync()
		defer unblock()
		if err := pl.RunPodSandbox(ctx, sb.clone()); err != nil {
			return "", err
		}
	}
	sb.State = StateReady
	if err := m.save(sb, phaseCreated); err != nil {
		return "", err
	}
	m.mu.Lock()
	m.pods[id] = newEntry(sb)
	m.mu.Unlock()
	log.Info("pod sandbox ready", "slice", sb.Slice, "ips", sb.IPs)
	return id, nil
}

// newSandbox fills in every path the sandbox will use, all derived from
// its ID, so that teardown can find them whatever step failed.
func (m *Manager) newSandbox(id string, cfg *runtimeapi.PodSandboxConfig, handler string, p *plan) *Sandbox {
	dir := m.podDir(id)
	sb := &Sandbox{
		ID:             id,
		Config:         cfg,
		RuntimeHandler: handler,
		CreatedAt:      time.Now(),
		State:          StateNotReady,
		Slice:          p.slice,
		OwnSlice:       p.ownSlice,
		ResolvConfPath: filepath.Join(dir, "resolv.conf"),
		HostsPath:      filepath.Join(dir, "hosts"),
		HostnamePath:   filepath.Join(dir, "hostname"),
		LogDirectory:   cfg.GetLogDirectory(),
	}
	if p.ownSlice {
		base := strings.TrimSuffix(m.opts.ParentSlice, ".slice")
		if base == "-" {
			base = "podunit"
		}
		sb.Slice = base + "-pod-" + id + ".slice"
	}
	sb.CgroupParent = systemd.SlicePath(sb.Slice)
	if !p.hostNet {
		sb.NetNSPath = m.pinPath("net", id)
		sb.UTSNSPath = m.pinPath("uts", id)
		sb.Hostname = cfg.GetHostname()
		if sb.Hostname == "" {
			// A new UTS namespace starts with the node's name; say so in
			// the pod's files too (containerd does the same).
			sb.Hostname, _ = os.Hostname()
		}
	}
	if !p.hostIPC {
		sb.IPCNSPath = m.pinPath("ipc", id)
		sb.ShmPath = filepath.Join(dir, "shm")
	}
	if p.uids != nil {
		sb.UserNSPath = m.pinPath("user", id)
	}
	if p.sharedPID {
		sb.PIDNSPath = m.pinPath("pid", id)
		sb.InitUnit = strings.TrimSuffix(sb.Slice, ".slice") + "-init.service"
		if !p.ownSlice {
			sb.InitUnit = "podunit-pod-" + id + "-init.service"
		}
	}
	return sb
}

func (m *Manager) setupSlice(ctx context.Context, sb *Sandbox, p *plan) error {
	md := sb.Config.GetMetadata()
	if sb.OwnSlice {
		desc := fmt.Sprintf("podunit pod %s/%s", md.GetNamespace(), md.GetName())
		limits := podLimits(p.resources, sb.Config.GetLinux().GetOverhead())
		if err := m.opts.Systemd.StartTransientUnit(ctx, sb.Slice, sliceProperties(desc, limits)); err != nil {
			return fmt.Errorf("pod slice %s: %w", sb.Slice, err)
		}
		return nil
	}
	// The kubelet owns this slice and has sized it already: the pod's
	// overhead included, and a memory or CPU limit only when every
	// container has one. The CRI's pod "resources" are only the sum of
	// the containers' (informational, as for containerd and CRI-O): written
	// here they would drop the overhead and could limit a pod the kubelet
	// left unlimited (node conformance "PodOverhead … Pod cgroup should be
	// sum of overhead and resource limits"). podunit never changes or
	// removes this slice.
	return nil
}

func (m *Manager) nsPins(sb *Sandbox) map[netns.Kind]string {
	pins := map[netns.Kind]string{}
	if sb.NetNSPath != "" {
		pins[netns.Net] = sb.NetNSPath
	}
	if sb.UTSNSPath != "" {
		pins[netns.UTS] = sb.UTSNSPath
	}
	if sb.IPCNSPath != "" {
		pins[netns.IPC] = sb.IPCNSPath
	}
	return pins
}

// setupNamespaces creates and pins the pod's namespaces, mounts its
// /dev/shm and configures what lives inside them: loopback, hostname,
// sysctls.
func (m *Manager) setupNamespaces(sb *Sandbox, p *plan) error {
	pins := m.nsPins(sb)
	if sb.UserNSPath != "" {
		if err := netns.NewInUser(sb.UserNSPath, p.uids, p.gids, pins); err != nil {
			return fmt.Errorf("pod namespaces: %w", err)
		}
	} else if err := netns.New(pins); err != nil {
		return fmt.Errorf("pod namespaces: %w", err)
	}
	if sb.ShmPath != "" {
		if err := os.MkdirAll(sb.ShmPath, 0o755); err != nil {
			return fmt.Errorf("pod shm: %w", err)
		}
		opts := fmt.Sprintf("mode=1777,size=%d", m.opts.ShmSize)
		if err := unix.Mount("shm", sb.ShmPath, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
			return fmt.Errorf("pod shm tmpfs: %w", err)
		}
	}
	if len(pins) == 0 {
		return nil
	}
	return netns.Do(pins, func() error {
		if sb.NetNSPath != "" {
			if err := network.LoopbackUp(); err != nil {
				return err
			}
		}
		if sb.UTSNSPath != "" && sb.Hostname != "" {
			if err := unix.Sethostname([]byte(sb.Hostname)); err != nil {
				return fmt.Errorf("pod hostname: %w", err)
			}
		}
		ipcRoot := -1
		if p.uids != nil {
			ipcRoot = int(p.uids[0].HostID)
		}
		return applySysctls(p.sysctls, ipcRoot)
	})
}

// applySysctls writes the pod's sysctls from the throw-away thread of
// netns.Do. The host's /proc/sys may be read-only (inside a container, or a
// test harness), so the thread takes a private mount namespace, mounted
// private so nothing propagates out, and a fresh procfs whose entries
// resolve against the thread's pod namespaces. The thread dies afterwards
// and the mount namespace with it.
//
// ipcRoot >= 0 is the host UID of the root of the user namespace owning
// the pod's IPC namespace: the kernel lets only that UID write its IPC
// sysctls (ipc_permissions checks the euid, not capabilities), so the
// thread takes it as its effective UID last, after the network and UTS
// ones, which host root writes.
func applySysctls(byNS map[podfiles.Namespace]map[string]string, ipcRoot int) error {
	if len(byNS) == 0 {
		return nil
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("private mount namespace for sysctls: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount procfs for sysctls: %w", err)
	}
	for _, ns := range []podfiles.Namespace{podfiles.NetNS, podfiles.UTSNS} {
		if err := podfiles.Apply("/proc/sys", byNS[ns]); err != nil {
			return err
		}
	}
	if len(byNS[podfiles.IPCNS]) > 0 && ipcRoot >= 0 {
		// The raw syscall changes this thread only (the libc and Go
		// wrappers change every thread); the thread is never reused.
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(ipcRoot), ^uintptr(0)); errno != 0 {
			return fmt.Errorf("take UID %d to set IPC sysctls: %w", ipcRoot, errno)
		}
	}
	return podfiles.Apply("/proc/sys", byNS[podfiles.IPCNS])
}

func (m *Manager) netRequest(sb *Sandbox) *network.Request {
	md := sb.Config.GetMetadata()
	req := &network.Request{
		PodID:      sb.ID,
		Name:       md.GetName(),
		Namespace:  md.GetNamespace(),
		UID:        md.GetUid(),
		CgroupPath: sb.CgroupParent,
	}
	if netns.IsPinned(sb.NetNSPath) {
		req.NetNS = sb.NetNSPath
	}
	// DEL must see the same port mappings as ADD so portmap finds its
	// rules; they are in the stored config.
	for _, pm := range sb.Config.GetPortMappings() {
		req.PortMappings = append(req.PortMappings, network.PortMapping{
			HostPort: pm.GetHostPort(), ContainerPort: pm.GetContainerPort(),
			Protocol: strings.ToLower(pm.GetProtocol().String()), HostIP: pm.GetHostIp(),
		})
	}
	req.Bandwidth, _ = network.BandwidthFromAnnotations(sb.Config.GetAnnotations())
	return req
}

func (m *Manager) writePodFiles(sb *Sandbox, p *plan) error {
	dir := m.podDir(sb.ID)
	hostname := sb.Hostname
	var hosts []byte
	if p.hostNet {
		var err error
		if hostname, err = os.Hostname(); err != nil {
			return fmt.Errorf("node hostname: %w", err)
		}
		if hosts, err = podfiles.NodeHosts(m.opts.HostHosts); err != nil {
			return err
		}
	} else {
		hosts = podfiles.Hosts(hostname, sb.IPs)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"resolv.conf", p.resolv}, {"hosts", hosts}, {"hostname", podfiles.Hostname(hostname)}} {
		if _, err := podfiles.WriteFile(dir, f.name, f.data); err != nil {
			return err
		}
	}
	return nil
}

// teardown removes everything a sandbox may own, in reverse order of
// creation. Every step tolerates its object being absent, so it serves
// rollback, Remove and crash recovery alike. Errors are collected, not
// short-circuited: one stuck step must not leak the rest.
func (m *Manager) teardown(ctx context.Context, sb *Sandbox) error {
	var errs []error
	if sb.InitUnit != "" {
		if err := m.opts.Systemd.StopUnit(ctx, sb.InitUnit); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", sb.InitUnit, err))
		}
	}
	if sb.PIDNSPath != "" {
		if err := netns.Unpin(sb.PIDNSPath); err != nil {
			errs = append(errs, err)
		}
	}
	if sb.NetNSPath != "" {
		if err := m.net.Teardown(ctx, m.netRequest(sb)); err != nil {
			if sb.NetworkUp {
				errs = append(errs, err)
			} else {
				m.log.Warn("repeated CNI DEL failed", "pod", sb.ID, "err", err)
			}
		} else {
			sb.NetworkUp = false
		}
	}
	if len(errs) > 0 {
		// Keep the netns until CNI has let go of it, so a retry can DEL
		// with the namespace still there.
		return errors.Join(errs...)
	}
	if sb.ShmPath != "" {
		if err := unmountAll(sb.ShmPath); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range m.nsPins(sb) {
		if err := netns.Unpin(p); err != nil {
			errs = append(errs, err)
		}
	}
	// Last: it owns the namespaces above.
	if sb.UserNSPath != "" {
		if err := netns.Unpin(sb.UserNSPath); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(m.podDir(sb.ID)); err != nil {
			errs = append(errs, fmt.Errorf("pod dir: %w", err))
		}
	}
	if sb.OwnSlice {
		if err := m.opts.Systemd.StopUnit(ctx, sb.Slice); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", sb.Slice, err))
		} else if err := unitcgroup.RemoveLeftover(m.opts.CgroupRoot, systemd.SlicePath(sb.Slice)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := removeState(m.statePath(sb.ID)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func unmountAll(p string) error {
	for {
		err := unix.Unmount(p, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
}
