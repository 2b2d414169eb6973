// Package config is podunit's one configuration struct: defaults, TOML
// loading with systemd-style drop-ins, and pure validation.
package config

import (
	"fmt"
	"net"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/sys/capability"
)

// Config mirrors the TOML tables of /etc/podunit/podunit.toml. A field
// tagged reload:"live" is applied by a reload (SIGHUP, systemctl reload);
// every other field needs a restart (see Reconcile).
type Config struct {
	Server    Server    `toml:"server"`
	Paths     Paths     `toml:"paths"`
	Systemd   Systemd   `toml:"systemd"`
	Image     Image     `toml:"image"`
	CNI       CNI       `toml:"cni"`
	Runtime   Runtime   `toml:"runtime"`
	Streaming Streaming `toml:"streaming"`
	Metrics   Metrics   `toml:"metrics"`
	GC        GC        `toml:"gc"`
	Logs      Logs      `toml:"logs"`
	CDI       CDI       `toml:"cdi"`
	NRI       NRI       `toml:"nri"`
}

// Server is the CRI endpoint.
type Server struct {
	Socket      string `toml:"socket" doc:"CRI unix socket (ignored under socket activation)."`
	SocketGroup string `toml:"socket_group" doc:"Group owning the socket (mode 0660); empty keeps root."`
	LogLevel    string `reload:"live" toml:"log_level" doc:"debug, info, warn or error."`
	LogFormat   string `toml:"log_format" doc:"text or json."`
}

// Paths are podunit's own directories.
type Paths struct {
	StateDir string `toml:"state_dir" doc:"Durable state: sandbox and container records."`
	RunDir   string `toml:"run_dir" doc:"Volatile state: bundles, namespace pins, pid files, runtime roots."`
}

// Systemd tunes the D-Bus side.
type Systemd struct {
	CallTimeout     Duration `toml:"call_timeout" doc:"Upper bound for every D-Bus call and systemd job wait."`
	ParentSlice     string   `toml:"parent_slice" doc:"Slice holding pods that come without a cgroup parent."`
	MaxParallelJobs int      `toml:"max_parallel_jobs" doc:"Concurrent start/stop jobs sent to PID 1."`
}

// Image configures image pulls and the image/layer store.
type Image struct {
	StorageRoot         string   `toml:"storage_root" doc:"Image and layer store (go.podman.io/storage graph root)."`
	StorageRunRoot      string   `toml:"storage_run_root" doc:"Volatile store state (mounts, locks)."`
	StorageDriver       string   `toml:"storage_driver" doc:"overlay or vfs; empty picks overlay, falling back to vfs."`
	StorageTransient    bool     `toml:"storage_transient" doc:"Containers' writable layers last one boot: their records in storage_run_root, unsynced, collected after a reboot; images stay durable. Tools sharing storage_root need the same run root and setting."`
	RegistriesConf      string   `reload:"live" toml:"registries_conf" doc:"containers-registries.conf(5): mirrors, insecure, blocked registries."`
	PolicyPath          string   `reload:"live" toml:"policy_path" doc:"containers-policy.json(5): signature policy."`
	AuthFile            string   `reload:"live" toml:"auth_file" doc:"containers-auth.json(5) with registry credentials; empty uses none."`
	PullProgressTimeout Duration `reload:"live" toml:"pull_progress_timeout" doc:"Cancel a pull that moved no bytes for this long."`
	MaxParallelPulls    int      `toml:"max_parallel_pulls" doc:"Different images pulled at the same time."`
	PauseImage          string   `reload:"live" toml:"pause_image" doc:"Image kept pinned for the kubelet; podunit needs no infra container."`
	PinnedImages        []string `reload:"live" toml:"pinned_images" doc:"More images reported as pinned, which the kubelet's image GC never removes: references or path.Match globs over the full name (registry.k8s.io/*, docker.io/library/busybox:*)."`
}

// CNI locates the network plugins and their configuration.
type CNI struct {
	ConfDir string   `toml:"conf_dir" doc:"CNI network configuration directory."`
	BinDirs []string `toml:"bin_dirs" doc:"Directories searched for CNI plugins."`
}

// Runtime selects OCI runtimes.
type Runtime struct {
	DefaultHandler string   `reload:"live" toml:"default_handler" doc:"Handler used when a pod names no RuntimeClass."`
	StartTimeout   Duration `toml:"start_timeout" doc:"Upper bound for starting a container (its unit's start job: runtime create and start)."`
	StopMargin     Duration `toml:"stop_margin" doc:"How long past a stop's grace period its unit may take to stop (the final SIGKILL)."`
	LogFlushWait   Duration `toml:"log_flush_wait" doc:"How long an exited container's last output may take to reach its CRI log before the exit is reported."`
	ExecOutputMax  int      `toml:"exec_output_max" doc:"Bytes of stdout and of stderr ExecSync returns (probes); the rest is dropped."`
	// The three operator defaults below shape each new container's spec;
	// a container that exists keeps the spec it was created with. They
	// need a restart: the container manager reads them, unlocked, from
	// the options it was built with.
	DefaultCapabilities []string `toml:"default_capabilities" doc:"Capabilities of a container whose request adds and drops none (containerd's and CRI-O's set); names with or without CAP_."`
	DefaultUlimits      []string `toml:"default_ulimits" doc:"Process limits every container starts with, name=soft[:hard] as in CRI-O (nofile=1048576:1048576; -1 is unlimited); empty keeps the runtime's, which are the container unit's."`
	// PrivateMountNamespace needs a restart: podunit enters the
	// namespace before anything else, and containers started with it keep
	// their mounts in it.
	PrivateMountNamespace bool   `toml:"private_mount_namespace" doc:"Keep container root filesystems, image volumes, bundle binds and namespace pins in a mount namespace of podunit's own (pinned at <run_dir>/mntns/mnt, a slave of the host's), out of PID 1's and the host's mount table; runc and crun run in it. Change it only on a node without pods (docs/containers.md)."`
	SeccompProfile        string `toml:"seccomp_profile" doc:"Seccomp profile file (runtime-spec or Docker JSON) for RuntimeDefault; empty uses podunit's built-in profile (Docker's allow-list)."`
	// Handlers come last: the sample shows them as subtables after the
	// table's plain keys. A reload probes the features of new or changed
	// ones.
	Handlers map[string]Handler `reload:"live" toml:"handlers" doc:"OCI runtimes by RuntimeClass handler name."`
}

// Handler is one OCI runtime a RuntimeClass may name.
type Handler struct {
	Type string `toml:"type" doc:"runc or crun: the command line dialect."`
	Path string `toml:"path" doc:"The runtime binary."`
	Root string `toml:"root" doc:"The runtime state directory (--root)."`
}

// Streaming is the exec/attach/port-forward server.
type Streaming struct {
	Address string `toml:"address" doc:"Streaming server listen address (host:port) of the session process podunit-stream.service; port 0 picks one."`
	TLSCert string `toml:"tls_cert" doc:"PEM certificate for the streaming server; empty serves plain HTTP."`
	TLSKey  string `toml:"tls_key" doc:"PEM key matching tls_cert."`
}

// Metrics is the Prometheus endpoint; empty address turns it off.
type Metrics struct {
	Address string `reload:"live" toml:"address" doc:"Prometheus metrics listen address (loopback host:port); empty turns metrics off."`
}

// GC schedules the garbage collectors.
type GC struct {
	Interval Duration `toml:"interval" doc:"How often the garbage collectors run; 0 runs them only at start."`
}

// Logs is where container output goes besides the CRI log file, which the
// node's log relay always writes.
type Logs struct {
	Journald bool `toml:"journald" doc:"Also hand container output to journald (journalctl -u podunit-ctr-<id>.service, CONTAINER_ID=...); best effort, never delays the CRI log file. Applies to containers started afterwards."`
	// A chatty container would otherwise load journald for the whole node;
	// the limit is journald's own per-unit one, so it only thins the journal.
	JournaldRateLimitInterval Duration `toml:"journald_rate_limit_interval" doc:"Per container: journald keeps at most journald_rate_limit_burst lines in each window this long and drops the rest from the journal (never from the CRI log file); 0 turns the limit off. Applies to containers started afterwards."`
	JournaldRateLimitBurst    uint32   `toml:"journald_rate_limit_burst" doc:"Lines per container and window that reach the journal (journald scales it up with free disk space, like its other limits); 0 turns the limit off."`
}

// CDI is the Container Device Interface: device vendors (GPU drivers,
// device plugins) describe their devices in spec files, and containers
// that name them get the spec's device nodes, mounts, environment and hooks.
type CDI struct {
	Enabled  bool     `toml:"enabled" doc:"Resolve the CDI devices containers request (CRI cdi_devices, cdi.k8s.io/* annotations); off, such a request is refused."`
	SpecDirs []string `toml:"spec_dirs" doc:"Directories with CDI spec files (*.json, *.yaml), re-read at each create that requests devices; a device in a later directory overrides one of the same name in an earlier one."`
}

// Default returns the configuration used when no file says otherwise.
func Default() Config {
	return Config{
		Server: Server{Socket: "/run/podunit/podunit.sock", LogLevel: "info", LogFormat: "text"},
		Paths:  Paths{StateDir: "/var/lib/podunit", RunDir: "/run/podunit"},
		Systemd: Systemd{
			CallTimeout:     Duration(30 * time.Second),
			ParentSlice:     "podunit.slice",
			MaxParallelJobs: 16,
		},
		Image: Image{
			StorageRoot:         "/var/lib/podunit/storage",
			StorageRunRoot:      "/run/podunit/storage",
			StorageTransient:    true,
			RegistriesConf:      "/etc/containers/registries.conf",
			PolicyPath:          "/etc/containers/policy.json",
			PullProgressTimeout: Duration(5 * time.Minute),
			MaxParallelPulls:    3,
			PauseImage:          "registry.k8s.io/pause:3.10",
		},
		CNI: CNI{ConfDir: "/etc/cni/net.d", BinDirs: []string{"/usr/lib/cni", "/opt/cni/bin"}},
		Runtime: Runtime{
			DefaultHandler:        "runc",
			StartTimeout:          Duration(2 * time.Minute),
			StopMargin:            Duration(15 * time.Second),
			LogFlushWait:          Duration(5 * time.Second),
			ExecOutputMax:         16 << 20,
			PrivateMountNamespace: true,
			Handlers: map[string]Handler{
				"runc": {Type: "runc", Path: "/usr/sbin/runc", Root: "/run/podunit/runc"},
				"crun": {Type: "crun", Path: "/usr/bin/crun", Root: "/run/podunit/crun"},
			},
			DefaultCapabilities: []string{
				"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID",
				"SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
			},
		},
		Streaming: Streaming{Address: "127.0.0.1:0"},
		GC:        GC{Interval: Duration(5 * time.Minute)},
		// journald's own defaults for every other unit (RateLimitIntervalSec,
		// RateLimitBurst in journald.conf).
		Logs: Logs{Journald: true, JournaldRateLimitInterval: Duration(30 * time.Second), JournaldRateLimitBurst: 10000},
		// containerd 2.x's defaults: on, the two directories of the CDI spec.
		CDI: CDI{Enabled: true, SpecDirs: []string{"/etc/cdi", "/var/run/cdi"}},
		// Off, as in CRI-O before 1.30: plugins see every pod and may
		// change every container. The paths are NRI's own defaults.
		NRI: NRI{
			SocketPath:          "/var/run/nri/nri.sock",
			PluginPath:          "/opt/nri/plugins",
			PluginConfigPath:    "/etc/nri/conf.d",
			RegistrationTimeout: Duration(5 * time.Second),
			RequestTimeout:      Duration(2 * time.Second),
		},
	}
}

// Validate checks the configuration without touching the host.
func (c *Config) Validate() error {
	var errs []string
	bad := func(key, format string, args ...any) {
		errs = append(errs, key+": "+fmt.Sprintf(format, args...))
	}
	abs := func(key, p string, optional bool) {
		if p == "" && optional {
			return
		}
		if !filepath.IsAbs(p) {
			bad(key, "must be an absolute path, got %q", p)
		}
	}
	abs("server.socket", c.Server.Socket, false)
	switch c.Server.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("server.log_level", "must be debug, info, warn or error, got %q", c.Server.LogLevel)
	}
	switch c.Server.LogFormat {
	case "text", "json":
	default:
		bad("server.log_format", "must be text or json, got %q", c.Server.LogFormat)
	}
	abs("paths.state_dir", c.Paths.StateDir, false)
	abs("paths.run_dir", c.Paths.RunDir, false)
	if c.Systemd.CallTimeout <= 0 {
		bad("systemd.call_timeout", "must be positive")
	}
	if c.Systemd.MaxParallelJobs <= 0 {
		bad("systemd.max_parallel_jobs", "must be positive")
	}
	if !strings.HasSuffix(c.Systemd.ParentSlice, ".slice") || strings.Contains(c.Systemd.ParentSlice, "/") {
		bad("systemd.parent_slice", "must be a slice name like podunit.slice, got %q", c.Systemd.ParentSlice)
	}
	abs("image.storage_root", c.Image.StorageRoot, false)
	abs("image.storage_run_root", c.Image.StorageRunRoot, false)
	switch c.Image.StorageDriver {
	case "", "overlay", "vfs":
	default:
		bad("image.storage_driver", "must be overlay or vfs, got %q", c.Image.StorageDriver)
	}
	abs("image.registries_conf", c.Image.RegistriesConf, false)
	abs("image.policy_path", c.Image.PolicyPath, false)
	abs("image.auth_file", c.Image.AuthFile, true)
	if c.Image.PullProgressTimeout <= 0 {
		bad("image.pull_progress_timeout", "must be positive")
	}
	if c.Image.MaxParallelPulls <= 0 {
		bad("image.max_parallel_pulls", "must be positive")
	}
	for _, p := range c.Image.PinnedImages {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			bad("image.pinned_images", "%q is not a reference or glob", p)
		}
	}
	abs("cni.conf_dir", c.CNI.ConfDir, false)
	for _, d := range c.CNI.BinDirs {
		abs("cni.bin_dirs", d, false)
	}
	if _, ok := c.Runtime.Handlers[c.Runtime.DefaultHandler]; !ok {
		bad("runtime.default_handler", "%q is not among runtime.handlers", c.Runtime.DefaultHandler)
	}
	if c.Logs.JournaldRateLimitInterval < 0 {
		bad("logs.journald_rate_limit_interval", "must not be negative")
	} else if d := c.Logs.JournaldRateLimitInterval.D(); d%time.Microsecond != 0 {
		bad("logs.journald_rate_limit_interval", "systemd counts in microseconds, got %s", d)
	}
	if c.Runtime.StartTimeout <= 0 {
		bad("runtime.start_timeout", "must be positive")
	}
	if c.Runtime.StopMargin <= 0 {
		bad("runtime.stop_margin", "must be positive")
	}
	if c.Runtime.LogFlushWait <= 0 {
		bad("runtime.log_flush_wait", "must be positive")
	}
	if c.Runtime.ExecOutputMax <= 0 {
		bad("runtime.exec_output_max", "must be positive")
	}
	for _, cp := range c.Runtime.DefaultCapabilities {
		if !knownCapability(cp) {
			bad("runtime.default_capabilities", "unknown capability %q", cp)
		}
	}
	if _, err := c.Runtime.Ulimits(); err != nil {
		errs = append(errs, err.Error())
	}
	abs("runtime.seccomp_profile", c.Runtime.SeccompProfile, true)
	for name, h := range c.Runtime.Handlers {
		key := "runtime.handlers." + name
		switch h.Type {
		case "runc", "crun":
		default:
			bad(key+".type", "must be runc or crun, got %q", h.Type)
		}
		abs(key+".path", h.Path, false)
		abs(key+".root", h.Root, false)
	}
	if c.Streaming.Address == "" {
		bad("streaming.address", "must be host:port")
	}
	if (c.Streaming.TLSCert == "") != (c.Streaming.TLSKey == "") {
		bad("streaming.tls_cert", "tls_cert and tls_key go together")
	}
	if c.Metrics.Address != "" {
		if err := CheckLoopback(c.Metrics.Address); err != nil {
			bad("metrics.address", "%v", err)
		}
	}
	if c.GC.Interval < 0 {
		bad("gc.interval", "must not be negative")
	}
	if c.CDI.Enabled && len(c.CDI.SpecDirs) == 0 {
		bad("cdi.spec_dirs", "must name a directory when cdi.enabled is true")
	}
	for _, d := range c.CDI.SpecDirs {
		abs("cdi.spec_dirs", d, false)
	}
	errs = append(errs, c.NRI.validate()...)
	if len(errs) > 0 {
		return fmt.Errorf("invalid configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// knownCapability accepts "net_admin", "NET_ADMIN" and "CAP_NET_ADMIN"
// for a capability this kernel headers' list knows.
func knownCapability(name string) bool {
	n := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(name)), "cap_")
	return slices.ContainsFunc(capability.ListKnown(), func(c capability.Cap) bool { return c.String() == n })
}

// Duration is a time.Duration written as "30s", "5m" in TOML.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. 30s, 5m)", b)
	}
	*d = Duration(v)
	return nil
}

// CheckLoopback accepts host:port on a loopback address: the metrics and
// profiling endpoint has no authentication.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", addr)
	}
	return nil
}
