package container

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/apparmor"
	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/mountns"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/selfbin"
	"github.com/podunit/podunit/unitprops"
)

// OptionsFromConfig derives the manager's options from podunit's
// configuration and the host: containers keep their records under
// <state_dir>/containers and their bundles under <run_dir>/containers, the
// units run this very binary as their helpers. log is the manager's logger
// (and AppArmor's).
func OptionsFromConfig(cfg *config.Config, log *slog.Logger) (Options, error) {
	self, err := os.Executable()
	if err != nil {
		return Options{}, fmt.Errorf("container manager: own executable: %w", err)
	}
	const cgroupRoot = "/sys/fs/cgroup"
	caps, host := DetectHost(cgroupRoot, log)
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	o := Options{
		NoHugetlb:  !DetectHugetlb(cgroupRoot, string(mountinfo)),
		StateDir:   filepath.Join(cfg.Paths.StateDir, "containers"),
		RunDir:     filepath.Join(cfg.Paths.RunDir, "containers"),
		Self:       self,
		UnitHelper: UnitHelper(self),
		CgroupRoot: cgroupRoot,
		Caps:       caps,
		Host:       host,
		NoJournal:  !cfg.Logs.Journald,
		JournalRateLimit: unitprops.RateLimit{
			Interval: cfg.Logs.JournaldRateLimitInterval.D(),
			Burst:    cfg.Logs.JournaldRateLimitBurst,
		},
		Logger: log,
	}
	if cfg.Runtime.PrivateMountNamespace {
		o.MountNS = mountns.Pin(cfg.Paths.RunDir)
	}
	if err := o.SetRuntime(cfg.Runtime); err != nil {
		return Options{}, err
	}
	if err := o.SetCDI(cfg.CDI); err != nil {
		return Options{}, err
	}
	return o, nil
}

// SetRuntime takes the [runtime] settings of podunit's configuration. It
// reads runtime.seccomp_profile and checks it now, so a broken file stops
// podunit at start instead of failing every RuntimeDefault container.
func (o *Options) SetRuntime(r config.Runtime) error {
	o.DefaultHandler = r.DefaultHandler
	o.StartTimeout = r.StartTimeout.D()
	o.StopMargin = r.StopMargin.D()
	o.LogFlushTimeout = r.LogFlushWait.D()
	o.ExecOutputMax = r.ExecOutputMax
	o.DefaultCapabilities = slices.Clone(r.DefaultCapabilities)
	ulimits, err := r.Ulimits()
	if err != nil {
		return fmt.Errorf("container manager: %w: %w", errdefs.ErrInvalid, err)
	}
	o.Rlimits = nil
	for _, u := range ulimits {
		o.Rlimits = append(o.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_" + strings.ToUpper(u.Name), Soft: u.Soft, Hard: u.Hard})
	}
	o.SeccompDefault = nil
	if r.SeccompProfile != "" {
		b, err := os.ReadFile(r.SeccompProfile)
		if err != nil {
			return fmt.Errorf("container manager: runtime.seccomp_profile: %w", err)
		}
		if err := oci.CheckSeccompProfile(b); err != nil {
			return fmt.Errorf("container manager: runtime.seccomp_profile %s: %w", r.SeccompProfile, err)
		}
		o.SeccompDefault = b
	}
	return nil
}

// ProbeFeatures asks every handler once what it supports (package oci
// owns the commands) and logs the answers. A handler that cannot answer
// is logged and gets no features: the kubelet is told nothing it cannot
// rely on, and its containers still run.
func ProbeFeatures(ctx context.Context, runtimes map[string]oci.Runtime, log *slog.Logger) map[string]oci.Features {
	names := make([]string, 0, len(runtimes))
	for n := range runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make(map[string]oci.Features, len(runtimes))
	for _, n := range names {
		f, err := runtimes[n].Features(ctx)
		if err != nil {
			log.WarnContext(ctx, "runtime handler features unknown: advertising none", "handler", n, "err", err)
		} else {
			log.InfoContext(ctx, "runtime handler features", "handler", n, "features", f)
		}
		out[n] = f
	}
	return out
}

// SetCDI takes the [cdi] settings of podunit's configuration: enabled, the
// registry reads the spec directories now and again at each create that
// requests devices.
func (o *Options) SetCDI(c config.CDI) error {
	o.CDI = nil
	if !c.Enabled {
		return nil
	}
	reg, err := oci.NewCDIRegistry(c.SpecDirs)
	if err != nil {
		return fmt.Errorf("container manager: %w", err)
	}
	o.CDI = reg
	return nil
}

// UnitHelperBinary is the small binary with the unit's helpers
// (cmd/podunit-unithelper), installed next to podunit.
const UnitHelperBinary = "podunit-unithelper"

// UnitHelper is what a container's unit runs as `H _stdio` and
// `H _exitrec`: the small binary next to self (the podunit binary) when
// there is one, else self. Whatever runs in the unit is charged to the
// container's memory and CPU limits.
func UnitHelper(self string) string {
	if small, ok := selfbin.Sibling(self, UnitHelperBinary); ok {
		return small
	}
	return self
}

// RuntimesFromConfig builds one runtime per configured handler. Execs keep
// their scratch files in <runDir>/exec; terminal execs run under self's
// exec helper.
func RuntimesFromConfig(handlers map[string]config.Handler, runDir, self string) (map[string]oci.Runtime, error) {
	names := make([]string, 0, len(handlers))
	for n := range handlers {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]oci.Runtime{}
	for _, name := range names {
		h := handlers[name]
		if h.Path == "" || h.Root == "" || runDir == "" || self == "" {
			return nil, fmt.Errorf("runtime handler %q: path, root, run dir and podunit's binary are required: %w", name, errdefs.ErrInvalid)
		}
		c := oci.CLIConfig{Name: name, Binary: h.Path, Root: h.Root, ExecDir: filepath.Join(runDir, "exec"),
			ExecHelper: []string{self, oci.ExecHelperName}}
		switch h.Type {
		case "runc", "":
			out[name] = oci.NewRunc(c)
		case "crun":
			out[name] = oci.NewCrun(c)
		default:
			return nil, fmt.Errorf("runtime handler %q: type %q is not runc or crun: %w", name, h.Type, errdefs.ErrInvalid)
		}
	}
	return out, nil
}

// DetectHost reads what the unit properties and specs depend on: the
// cgroup layout, systemd's version and this process's limits. Failures
// fall back to conservative values (v1 names, systemd 252's features).
// With AppArmor on, RuntimeDefault maps to podunit's default profile,
// loaded on first use; log gets AppArmor's warnings.
func DetectHost(cgroupRoot string, log *slog.Logger) (unitprops.Caps, oci.Host) {
	caps := unitprops.Caps{SystemdVersion: systemdVersion()}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		caps.CgroupV2 = true
	}
	host := oci.Host{CgroupNamespace: caps.CgroupV2}
	if aa := apparmor.NewHost(log); aa.Enabled() {
		host.AppArmorEnabled = true
		host.AppArmorDefaultProfile = apparmor.DefaultProfile
		host.AppArmor = aa
	}
	if adj, err := oci.CurrentOOMScoreAdj(); err == nil {
		host.OOMScoreAdjMin = &adj
	}
	if c, err := oci.HostCapabilities(); err == nil {
		host.Capabilities = c
	}
	if d, err := oci.HostDevices(); err == nil {
		host.Devices = d
	}
	return caps, host
}

// DetectHugetlb reports whether an OCI runtime can apply hugepage limits:
// on a unified hierarchy when hugetlb is among its controllers, otherwise
// when a cgroup v1 hierarchy carries it. On v1-hybrid hosts whose hugetlb
// is bound to the cgroup2 tree, runc (v1 mode) fails every container that
// has hugepage limits ("cannot set hugetlb limit"); CRI-O and containerd
// drop the limits there as well.
func DetectHugetlb(cgroupRoot, mountinfo string) bool {
	if b, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		for _, c := range strings.Fields(string(b)) {
			if c == "hugetlb" {
				return true
			}
		}
		return false
	}
	for _, line := range strings.Split(mountinfo, "\n") {
		_, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f := strings.Fields(post)
		if len(f) < 3 || f[0] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(f[2], ",") {
			if opt == "hugetlb" {
				return true
			}
		}
	}
	return false
}

// systemdVersion asks systemctl ("systemd 252 (252.39-1~deb12u2)").
func systemdVersion() int {
	out, err := exec.Command("systemctl", "--version").Output()
	if err != nil {
		return 252
	}
	return parseSystemdVersion(string(out))
}

func parseSystemdVersion(s string) int {
	f := strings.Fields(s)
	if len(f) >= 2 && f[0] == "systemd" {
		if v, err := strconv.Atoi(f[1]); err == nil {
			return v
		}
	}
	return 252
}
