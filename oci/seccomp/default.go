package seccomp

import (
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The RuntimeDefault profile: the syscall allow-list of the well-known
// Docker/containerd default profile, kept as data. Everything not listed
// fails with EPERM; syscalls guarded by a capability are only allowed when the
// container holds it.

// allowAlways is the unconditional allow-list.
const allowAlways = `
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64
clock_nanosleep clock_nanosleep_time64 close close_range connect copy_file_range creat
dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2
epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit exit_group faccessat
faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir fchmod fchmodat fchown
fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock fork fremovexattr
fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex
futex_time64 futex_waitv futimesat getcpu getcwd getdents getdents64 getegid getegid32
geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid
getpgrp getpid getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32
getrlimit get_robust_list getrusage getsid getsockname getsockopt get_thread_area gettid
gettimeofday getuid getuid32 getxattr inotify_add_watch inotify_init inotify_init1
inotify_rm_watch io_cancel ioctl io_destroy io_getevents io_pgetevents io_pgetevents_time64
ioprio_get ioprio_set io_setup io_submit io_uring_enter io_uring_register io_uring_setup
ipc kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lchown32
lgetxattr link linkat listen listxattr llistxattr _llseek lremovexattr lseek lsetxattr
lstat lstat64 madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod
mknodat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap
msgctl msgget msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep
newfstatat _newselect open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2
pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv preadv2
prlimit64 process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read
readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg
remap_file_pages removexattr rename renameat renameat2 restart_syscall rmdir rseq
rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend
rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr
sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler
sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr
sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop
semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid setfsgid32
setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid setpriority
setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32
setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid
setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4
sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64 statx
symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create
timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64
timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times
tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat utime utimensat
utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev
process_vm_readv process_vm_writev ptrace
`

// capGated: syscalls allowed only with the capability that makes them safe.
var capGated = []struct {
	cap   string
	names string
}{
	{"CAP_DAC_READ_SEARCH", "open_by_handle_at"},
	{"CAP_SYS_ADMIN", "bpf clone clone3 fanotify_init fsconfig fsmount fsopen fspick lookup_dcookie " +
		"mount mount_setattr move_mount open_tree perf_event_open quotactl quotactl_fd setdomainname " +
		"sethostname setns syslog umount umount2 unshare"},
	{"CAP_SYS_BOOT", "reboot"},
	{"CAP_SYS_CHROOT", "chroot"},
	{"CAP_SYS_MODULE", "delete_module init_module finit_module"},
	{"CAP_SYS_PACCT", "acct"},
	{"CAP_SYS_PTRACE", "kcmp pidfd_getfd process_madvise process_vm_readv process_vm_writev ptrace"},
	{"CAP_SYS_RAWIO", "iopl ioperm"},
	{"CAP_SYS_TIME", "settimeofday stime clock_settime clock_settime64"},
	{"CAP_SYS_TTY_CONFIG", "vhangup"},
	{"CAP_SYS_NICE", "get_mempolicy mbind set_mempolicy set_mempolicy_home_node"},
	{"CAP_SYSLOG", "syslog"},
	{"CAP_BPF", "bpf"},
	{"CAP_PERFMON", "perf_event_open"},
}

// archGated: architecture-specific syscalls, keyed by GOARCH values.
var archGated = []struct {
	arches []string
	names  string
}{
	{[]string{"ppc64le"}, "sync_file_range2 swapcontext"},
	{[]string{"arm", "arm64"}, "arm_fadvise64_64 arm_sync_file_range sync_file_range2 breakpoint cacheflush set_tls"},
	{[]string{"amd64", "x32"}, "arch_prctl"},
	{[]string{"amd64", "x32", "386"}, "modify_ldt"},
	{[]string{"s390", "s390x"}, "s390_pci_mmio_read s390_pci_mmio_write s390_runtime_instr"},
	{[]string{"riscv64"}, "riscv_flush_icache"},
}

// Namespace-creating clone flags (CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|
// NEWPID|NEWNET): without CAP_SYS_ADMIN, clone is allowed only when none is set.
const cloneNamespaceFlags = 0x7E020000

// Personalities a container may switch to: PER_LINUX, UNAME26, PER_LINUX32,
// UNAME26|PER_LINUX32, and the 0xffffffff query.
var allowedPersonalities = []uint64{0x0, 0x0008, 0x20000, 0x20008, 0xffffffff}

// AF_VSOCK: sockets of that family reach the hypervisor, not the pod network.
const afVsock = 40

// DefaultProfile returns the built-in RuntimeDefault profile document.
func DefaultProfile() *Profile {
	eperm := uint(1)
	enosys := uint(38)
	p := &Profile{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		ArchMap: []ArchMap{
			{specs.ArchX86_64, []specs.Arch{specs.ArchX86, specs.ArchX32}},
			{specs.ArchAARCH64, []specs.Arch{specs.ArchARM}},
			{specs.ArchMIPS64, []specs.Arch{specs.ArchMIPS, specs.ArchMIPS64N32}},
			{specs.ArchMIPS64N32, []specs.Arch{specs.ArchMIPS, specs.ArchMIPS64}},
			{specs.ArchMIPSEL64, []specs.Arch{specs.ArchMIPSEL, specs.ArchMIPSEL64N32}},
			{specs.ArchMIPSEL64N32, []specs.Arch{specs.ArchMIPSEL, specs.ArchMIPSEL64}},
			{specs.ArchS390X, []specs.Arch{specs.ArchS390}},
			{specs.ArchRISCV64, nil},
		},
	}
	allow := func(names string, in, ex *Gate, args ...specs.LinuxSeccompArg) {
		p.Syscalls = append(p.Syscalls, Syscall{
			Names: strings.Fields(names), Action: specs.ActAllow, Args: args, Includes: in, Excludes: ex,
		})
	}
	allow(allowAlways, nil, nil)
	allow("socket", nil, nil, specs.LinuxSeccompArg{Index: 0, Value: afVsock, Op: specs.OpNotEqual})
	for _, v := range allowedPersonalities {
		allow("personality", nil, nil, specs.LinuxSeccompArg{Index: 0, Value: v, Op: specs.OpEqualTo})
	}
	for _, a := range archGated {
		allow(a.names, &Gate{Arches: a.arches}, nil)
	}
	for _, c := range capGated {
		allow(c.names, &Gate{Caps: []string{c.cap}}, nil)
	}
	// s390 passes clone's flags as the second argument.
	allow("clone", nil, &Gate{Caps: []string{"CAP_SYS_ADMIN"}, Arches: []string{"s390", "s390x"}},
		specs.LinuxSeccompArg{Index: 0, Value: cloneNamespaceFlags, Op: specs.OpMaskedEqual})
	allow("clone", &Gate{Arches: []string{"s390", "s390x"}}, &Gate{Caps: []string{"CAP_SYS_ADMIN"}},
		specs.LinuxSeccompArg{Index: 1, Value: cloneNamespaceFlags, Op: specs.OpMaskedEqual})
	// clone3's flags live in a struct seccomp cannot inspect: answer ENOSYS so
	// libc falls back to clone, which the rules above can filter.
	p.Syscalls = append(p.Syscalls, Syscall{
		Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys,
		Excludes: &Gate{Caps: []string{"CAP_SYS_ADMIN"}},
	})
	return p
}

// Default returns the RuntimeDefault filter for a container with f.Caps.
func Default(f Filter) *specs.LinuxSeccomp {
	s, err := DefaultProfile().Build(f)
	if err != nil {
		// The built-in profile is constant; the test suite builds it for every
		// architecture, so this cannot happen at run time.
		panic("seccomp: built-in default profile is invalid: " + err.Error())
	}
	return s
}
