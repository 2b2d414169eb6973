package oci

// Tables of defaults, kept apart from the logic that applies them.

// KnownCapabilities is every capability Linux defines, in bit order; "ALL"
// expands to the subset the host can grant (Host.Capabilities).
var KnownCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// DefaultMaskedPaths hide host information from unprivileged containers when
// the kubelet sends none.
var DefaultMaskedPaths = []string{
	"/proc/acpi",
	"/proc/asound",
	"/proc/interrupts",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/sys/devices/virtual/powercap",
	"/sys/firmware",
}

// DefaultReadonlyPaths are the kernel knobs an unprivileged container may read
// but not change.
var DefaultReadonlyPaths = []string{
	"/proc/bus",
	"/proc/fs",
	"/proc/irq",
	"/proc/sys",
	"/proc/sysrq-trigger",
}

// DefaultPath is PATH when neither the image nor the config sets one.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Container paths the pod provides; a CRI mount at the same path wins.
const (
	etcHosts      = "/etc/hosts"
	etcResolvConf = "/etc/resolv.conf"
	etcHostname   = "/etc/hostname"
	devShm        = "/dev/shm"
)

// namespacedSysctlPrefixes: sysctls that belong to a namespace, so a pod can
// set them without touching the host; the value names that namespace.
var namespacedSysctlPrefixes = []struct {
	prefix string
	ns     string
}{
	{"kernel.shm", "ipc"},
	{"kernel.msg", "ipc"},
	{"kernel.sem", "ipc"},
	{"fs.mqueue.", "ipc"},
	{"net.", "network"},
	{"kernel.hostname", "uts"},
	{"kernel.domainname", "uts"},
}
