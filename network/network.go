// Package network attaches pods to the node's network with CNI plugins
// (libcni): ADD when a pod starts, DEL when it stops.
package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/podunit/podunit/errdefs"
	"golang.org/x/sys/unix"
)

// PortMapping is one hostPort as the portmap plugin's portMappings
// capability expects it.
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Bandwidth is the bandwidth capability, rates in bits per second.
type Bandwidth struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

// Request describes the pod being attached or detached.
type Request struct {
	PodID string
	// NetNS is the pinned network namespace; empty on DEL when the pin is
	// gone, which CNI plugins accept as "release what you hold".
	NetNS        string
	Name         string
	Namespace    string
	UID          string
	PortMappings []PortMapping
	Bandwidth    *Bandwidth
	// CgroupPath is the pod's cgroup (slice path) for the cgroupPath capability.
	CgroupPath string
}

// Result is what ADD produced.
type Result struct {
	Network string
	// IPs are the pod addresses without prefix length, IPv4 first: the
	// first one is the pod's primary IP.
	IPs []string
	// Raw is the CNI result as the plugin chain returned it.
	Raw json.RawMessage
}

// Plugin is the seam between the pod manager and CNI; tests fake it.
type Plugin interface {
	Setup(ctx context.Context, req *Request) (*Result, error)
	Teardown(ctx context.Context, req *Request) error
	// Ready reports whether a network configuration is present.
	Ready(ctx context.Context) error
}

// Options locate the CNI configuration and plugins: ConfDir and BinDirs
// are the [cni] table of package config.
type Options struct {
	ConfDir  string
	BinDirs  []string
	CacheDir string // libcni's result cache; empty is libcni's /var/lib/cni
	IfName   string // the pod's interface; empty is eth0, the Kubernetes name
}

// CNI is the libcni-backed Plugin.
type CNI struct {
	opts Options
	cni  *libcni.CNIConfig
}

var _ Plugin = (*CNI)(nil)

// NewCNI returns a Plugin that reads the configuration on every call, so a
// network installed after podunit started (the usual order on a new node)
// is picked up without a restart.
func NewCNI(opts Options) *CNI {
	if opts.IfName == "" {
		opts.IfName = "eth0"
	}
	return &CNI{opts: opts, cni: libcni.NewCNIConfigWithCacheDir(opts.BinDirs, opts.CacheDir, nil)}
}

// config loads the first configuration in lexical order, as the kubelet's
// convention for CNI configuration directories has it.
func (c *CNI) config() (*libcni.NetworkConfigList, error) {
	files, err := libcni.ConfFiles(c.opts.ConfDir, []string{".conflist", ".conf", ".json"})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cni config dir %s: %w", c.opts.ConfDir, err)
	}
	sort.Strings(files)
	var lastErr error
	for _, f := range files {
		var list *libcni.NetworkConfigList
		if strings.HasSuffix(f, ".conflist") {
			list, err = libcni.NetworkConfFromFile(f)
		} else {
			// Single-plugin .conf files are deprecated in libcni but still
			// what several network add-ons install; the kubelet accepts them.
			var one *libcni.PluginConfig
			//lint:ignore SA1019 see above
			if one, err = libcni.ConfFromFile(f); err == nil {
				//lint:ignore SA1019 see above
				list, err = libcni.ConfListFromConf(one)
			}
		}
		if err != nil {
			lastErr = fmt.Errorf("cni config %s: %w", f, err)
			continue
		}
		return list, nil
	}
	if lastErr != nil {
		return nil, fmt.Errorf("no usable cni config: %v: %w", lastErr, errdefs.ErrUnavailable)
	}
	return nil, fmt.Errorf("no cni config in %s: %w", c.opts.ConfDir, errdefs.ErrUnavailable)
}

func (c *CNI) runtimeConf(req *Request) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{
		ContainerID: req.PodID,
		NetNS:       req.NetNS,
		IfName:      c.opts.IfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", req.Namespace},
			{"K8S_POD_NAME", req.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", req.PodID},
			{"K8S_POD_UID", req.UID},
		},
		CapabilityArgs: map[string]any{},
	}
	pm := []PortMapping{}
	for _, p := range req.PortMappings {
		if p.HostPort > 0 {
			pm = append(pm, p)
		}
	}
	rt.CapabilityArgs["portMappings"] = pm
	if req.Bandwidth != nil {
		rt.CapabilityArgs["bandwidth"] = req.Bandwidth
	}
	if req.CgroupPath != "" {
		rt.CapabilityArgs["cgroupPath"] = req.CgroupPath
	}
	return rt
}

// Setup runs ADD on the configured network.
func (c *CNI) Setup(ctx context.Context, req *Request) (*Result, error) {
	list, err := c.config()
	if err != nil {
		return nil, err
	}
	res, err := c.cni.AddNetworkList(ctx, list, c.runtimeConf(req))
	if err != nil {
		return nil, fmt.Errorf("cni add %s for pod %s: %w", list.Name, req.PodID, err)
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("cni result of %s: %w", list.Name, err)
	}
	raw, err := json.Marshal(cur)
	if err != nil {
		return nil, fmt.Errorf("encode cni result: %w", err)
	}
	out := &Result{Network: list.Name, IPs: SortIPs(cur.IPs), Raw: raw}
	if len(out.IPs) == 0 {
		return out, fmt.Errorf("cni network %s gave pod %s no IP: %w", list.Name, req.PodID, errdefs.ErrUnavailable)
	}
	return out, nil
}

// Teardown runs DEL. It is safe to repeat and works without the namespace.
func (c *CNI) Teardown(ctx context.Context, req *Request) error {
	list, err := c.config()
	if err != nil {
		return err
	}
	if err := c.cni.DelNetworkList(ctx, list, c.runtimeConf(req)); err != nil {
		return fmt.Errorf("cni del %s for pod %s: %w", list.Name, req.PodID, err)
	}
	return nil
}

// Ready reports whether a usable configuration exists.
func (c *CNI) Ready(ctx context.Context) error {
	_, err := c.config()
	return err
}

// SortIPs returns the addresses, IPv4 before IPv6, keeping plugin order
// within a family.
func SortIPs(ips []*types100.IPConfig) []string {
	var v4, v6 []string
	for _, ip := range ips {
		if ip == nil || ip.Address.IP == nil {
			continue
		}
		if ip.Address.IP.To4() != nil {
			v4 = append(v4, ip.Address.IP.String())
		} else {
			v6 = append(v6, ip.Address.IP.String())
		}
	}
	return append(v4, v6...)
}

// LoopbackUp sets lo up in the calling thread's network namespace (call it
// inside netns.Do); it does not depend on the loopback plugin being
// present in the configuration.
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// Annotation keys the kubelet uses for pod bandwidth limits.
const (
	IngressBandwidthAnnotation = "kubernetes.io/ingress-bandwidth"
	EgressBandwidthAnnotation  = "kubernetes.io/egress-bandwidth"
)

// BandwidthFromAnnotations reads the bandwidth annotations; nil when
// neither is set. Bursts are left unlimited (MaxUint32 bits, the largest the
// bandwidth plugin's tbf accepts), as containerd and CRI-O do.
func BandwidthFromAnnotations(ann map[string]string) (*Bandwidth, error) {
	in, inOK := ann[IngressBandwidthAnnotation]
	eg, egOK := ann[EgressBandwidthAnnotation]
	if !inOK && !egOK {
		return nil, nil
	}
	bw := &Bandwidth{}
	if inOK {
		r, err := ParseQuantity(in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", IngressBandwidthAnnotation, err)
		}
		bw.IngressRate, bw.IngressBurst = r, math.MaxUint32
	}
	if egOK {
		r, err := ParseQuantity(eg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EgressBandwidthAnnotation, err)
		}
		bw.EgressRate, bw.EgressBurst = r, math.MaxUint32
	}
	return bw, nil
}

// ParseQuantity parses a Kubernetes quantity like "10M" or "1Gi" as an
// integer (bits per second for bandwidth).
func ParseQuantity(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	mult := uint64(1)
	suffixes := []struct {
		s string
		m uint64
	}{
		{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50},
		{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15},
	}
	for _, suf := range suffixes {
		if strings.HasSuffix(s, suf.s) {
			s, mult = strings.TrimSuffix(s, suf.s), suf.m
			break
		}
	}
	var n uint64
	if s == "" {
		return 0, fmt.Errorf("quantity %q: %w", s, errdefs.ErrInvalid)
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("quantity %q: %w", s, errdefs.ErrInvalid)
		}
		if n > (math.MaxUint64-9)/10 {
			return 0, fmt.Errorf("quantity %q too large: %w", s, errdefs.ErrInvalid)
		}
		n = n*10 + uint64(r-'0')
	}
	if n != 0 && mult > math.MaxUint64/n {
		return 0, fmt.Errorf("quantity %q too large: %w", s, errdefs.ErrInvalid)
	}
	return n * mult, nil
}
