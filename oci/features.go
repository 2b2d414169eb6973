package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go/features"
	"golang.org/x/sys/unix"
)

// FeaturesTimeout bounds one handler's probe: `runc features` and
// `crun --version` answer in milliseconds, a hung binary must not hold up
// podunit's start.
const FeaturesTimeout = 10 * time.Second

// Features is what one runtime handler can do on this host: what the
// handler says it supports, ANDed with what the kernel offers. They are
// probed once at start (Runtime.Features); a handler changes only with
// podunit's configuration.
type Features struct {
	// Source says how the handler was asked: "runc features",
	// "crun features" or "crun --version".
	Source string
	// Version is the handler's version as it reports it ("" when unknown).
	Version string
	// Flags are crun's compile-time feature flags ("+SECCOMP", ...) from
	// --version; they are logged, not interpreted.
	Flags []string
	// RecursiveReadOnly: the handler knows the "rro" mount option and the
	// kernel has mount_setattr(2) (Linux 5.12), which "rro" needs.
	RecursiveReadOnly bool
	// UserNamespaces: the handler creates user namespaces and idmapped
	// mounts (volumes of a user-namespaced pod), and the kernel has both.
	UserNamespaces bool
	// Checkpoint: the handler can checkpoint and restore with CRIU (runc's
	// checkpoint.enabled annotation, crun's +CRIU build flag). The criu
	// binary itself is looked for only when a checkpoint is asked for.
	Checkpoint bool
}

// Kernel is what the running kernel offers the handlers' features.
type Kernel struct {
	// MountSetattr: mount_setattr(2) exists (recursive read-only and
	// idmapped mounts).
	MountSetattr bool
	// UserNamespaces: the kernel was built with user namespaces.
	UserNamespaces bool
}

// ProbeKernel asks the kernel itself instead of guessing from its
// version: distribution kernels backport syscalls and seccomp or a
// sandbox can hide them.
func ProbeKernel() Kernel {
	// An empty change on an invalid fd changes nothing: where the syscall
	// exists it succeeds (recent kernels return before looking at the fd)
	// or fails with EBADF; where it does not, ENOSYS (or EPERM under a
	// seccomp filter).
	err := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{})
	_, uerr := os.Stat("/proc/self/ns/user")
	return Kernel{
		MountSetattr:   !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM),
		UserNamespaces: uerr == nil,
	}
}

// FeaturesFromSpec reads the runtime-spec features document that
// `runc features` (runc 1.1+) and `crun features` (crun 1.8.6+) print.
func FeaturesFromSpec(source string, doc []byte, k Kernel) (Features, error) {
	var f features.Features
	if err := json.Unmarshal(doc, &f); err != nil {
		return Features{}, fmt.Errorf("%s: decode: %w", source, err)
	}
	out := Features{Source: source}
	// runc names its version in an annotation; crun's document has none
	// podunit relies on, so its Version stays empty.
	out.Version = f.Annotations["org.opencontainers.runc.version"]
	// crun's features document uses runc's annotation name as well.
	out.Checkpoint = f.Annotations["org.opencontainers.runc.checkpoint.enabled"] == "true"
	out.RecursiveReadOnly = slices.Contains(f.MountOptions, "rro") && k.MountSetattr
	if l := f.Linux; l != nil {
		idmap := l.MountExtensions != nil && l.MountExtensions.IDMap != nil &&
			l.MountExtensions.IDMap.Enabled != nil && *l.MountExtensions.IDMap.Enabled
		out.UserNamespaces = slices.Contains(l.Namespaces, "user") && idmap &&
			k.UserNamespaces && k.MountSetattr
	}
	return out, nil
}

// crun releases that added what podunit asks of a handler, from crun's
// NEWS: crun before 1.8.6 has no `features` command, so these are the
// only way to know.
var (
	// crun 1.4: "add support for recursive mount options. e.g. ... rro".
	crunRecursiveMountOptions = [3]int{1, 4, 0}
	// crun 1.8.1: idmapped mounts take the same mappings as the user
	// namespace, as runc and the CRI send them (1.4 to 1.8 expected the
	// inverse).
	crunIDMappedMounts = [3]int{1, 8, 1}
)

// FeaturesFromCrunVersion reads `crun --version` for a crun without a
// `features` command: its version (what it supports, by crun's NEWS) and
// its compile-time flags.
func FeaturesFromCrunVersion(out string, k Kernel) (Features, error) {
	f := Features{Source: "crun --version"}
	var ver [3]int
	found := false
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "crun version "); ok {
			var err error
			if ver, err = parseVersion(v); err != nil {
				return Features{}, fmt.Errorf("crun --version: %w", err)
			}
			f.Version, found = v, true
		}
		if strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-") {
			f.Flags = strings.Fields(line)
			f.Checkpoint = slices.Contains(f.Flags, "+CRIU")
		}
	}
	if !found {
		return Features{}, fmt.Errorf("crun --version: no \"crun version\" line in %q", out)
	}
	f.RecursiveReadOnly = !versionLess(ver, crunRecursiveMountOptions) && k.MountSetattr
	// crun creates user namespaces whenever the kernel can (it needs no
	// build flag for them); volumes need idmapped mounts.
	f.UserNamespaces = !versionLess(ver, crunIDMappedMounts) && k.UserNamespaces && k.MountSetattr
	return f, nil
}

// parseVersion reads "1.8.1" (a missing patch is 0, a suffix like
// "+dev" or "-rc1" is ignored).
func parseVersion(s string) ([3]int, error) {
	var v [3]int
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "+-~ "); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return v, fmt.Errorf("version %q is not major.minor[.patch]", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("version %q is not major.minor[.patch]", s)
		}
		v[i] = n
	}
	return v, nil
}

func versionLess(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// featuresArgv asks for the runtime-spec features document.
func (c *CLI) featuresArgv() []string { return append(c.global(), "features") }

// versionArgv is crun's fallback for releases without `features`; nil
// for runc, which has had `features` since 1.1.
func (c *CLI) versionArgv() []string {
	if c.flavor != FlavorCrun {
		return nil
	}
	return append(c.global(), "--version")
}

// Features implements Runtime: `features` first (runc, crun 1.8.6+); a
// crun that does not know it ("unknown command features") is asked for its
// --version instead. The kernel's part is probed alongside.
func (c *CLI) Features(ctx context.Context) (Features, error) {
	ctx, cancel := context.WithTimeout(ctx, FeaturesTimeout)
	defer cancel()
	k := ProbeKernel()
	out, err := c.command(ctx, c.featuresArgv())
	if err == nil {
		return FeaturesFromSpec(c.cfg.Name+" features", out, k)
	}
	if c.flavor != FlavorCrun || ctx.Err() != nil {
		return Features{}, err
	}
	vout, verr := c.command(ctx, c.versionArgv())
	if verr != nil {
		return Features{}, fmt.Errorf("%w; %w", err, verr)
	}
	return FeaturesFromCrunVersion(string(vout), k)
}

// LogValue is how podunit logs a handler's features at start.
func (f Features) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("source", f.Source), slog.String("version", f.Version),
		slog.Bool("recursive_read_only", f.RecursiveReadOnly), slog.Bool("user_namespaces", f.UserNamespaces),
		slog.Bool("checkpoint", f.Checkpoint),
		slog.String("flags", strings.Join(f.Flags, " ")),
	)
}
