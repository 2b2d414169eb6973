package oci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// The non-pure helpers that fill a SpecInput from the host.

// HostCapabilities returns the capabilities this process can hand to a
// container: bounding ∩ permitted. On these machines CAP_SYS_RESOURCE is not
// in the bounding set, and asking runc for it fails the container.
func HostCapabilities() ([]string, error) {
	return capabilitiesFromStatus("/proc/self/status")
}

func capabilitiesFromStatus(statusFile string) ([]string, error) {
	f, err := os.Open(statusFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var bnd, prm uint64
	var seen int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "CapBnd" && k != "CapPrm") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", statusFile, k, err)
		}
		if k == "CapBnd" {
			bnd = n
		} else {
			prm = n
		}
		seen++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if seen != 2 {
		return nil, fmt.Errorf("%s: CapBnd/CapPrm missing", statusFile)
	}
	var caps []string
	for i, c := range KnownCapabilities {
		if bnd&prm&(1<<uint(i)) != 0 {
			caps = append(caps, c)
		}
	}
	return caps, nil
}

// CurrentOOMScoreAdj is this process's oom_score_adj, the floor for
// Host.OOMScoreAdjMin.
func CurrentOOMScoreAdj() (int, error) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// AppArmorKernel is the host's AppArmor as LoadAppArmor needs it
// (apparmor.Host).
type AppArmorKernel interface {
	// IsLoaded: a profile of that name is loaded in the kernel.
	IsLoaded(name string) (bool, error)
	// EnsureDefault loads podunit's default profile under name unless it
	// is loaded.
	EnsureDefault(ctx context.Context, name string) error
}

// AppArmorState is what the kernel said about the profiles a container's
// config needs (LoadAppArmor); withAppArmor decides by it.
type AppArmorState struct {
	// LocalhostLoaded: the Localhost profile the config names is loaded.
	LocalhostLoaded bool
	// DefaultErr is why Host.AppArmorDefaultProfile could not be loaded;
	// nil when it is loaded or not needed.
	DefaultErr error
}

// LoadAppArmor asks the kernel about the AppArmor profile sc names (typed
// field, else the deprecated string): whether a Localhost profile is
// loaded, or, for RuntimeDefault and an unset profile, loads the default
// one when it is not. Nothing is asked for privileged or Unconfined
// containers or with AppArmor off. Errors are the kernel's (unreadable
// profiles list); a failed default load is returned in the state.
func LoadAppArmor(ctx context.Context, sc *runtimeapi.LinuxContainerSecurityContext, host Host) (AppArmorState, error) {
	var st AppArmorState
	p := appArmorProfile(sc)
	if !host.AppArmorEnabled || host.AppArmor == nil || sc.GetPrivileged() ||
		p.GetProfileType() == runtimeapi.SecurityProfile_Unconfined {
		return st, nil
	}
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_Localhost:
		name, err := appArmorLocalhost(p)
		if err != nil {
			return st, nil // withAppArmor rejects it
		}
		ok, err := host.AppArmor.IsLoaded(name)
		if err != nil {
			return st, fmt.Errorf("apparmor localhost profile %q: %w", name, err)
		}
		st.LocalhostLoaded = ok
	case runtimeapi.SecurityProfile_RuntimeDefault: // also unset (nil)
		if host.AppArmorDefaultProfile != "" {
			st.DefaultErr = host.AppArmor.EnsureDefault(ctx, host.AppArmorDefaultProfile)
		}
	}
	return st, nil
}

// LoadSeccompLocalhost reads the Localhost seccomp profile sc names (typed
// field or legacy "localhost/<path>"); nil when it names none.
func LoadSeccompLocalhost(sc *runtimeapi.LinuxContainerSecurityContext) ([]byte, error) {
	p := seccompProfile(sc)
	if p.GetProfileType() != runtimeapi.SecurityProfile_Localhost || sc.GetPrivileged() {
		return nil, nil
	}
	ref := p.GetLocalhostRef()
	if !filepath.IsAbs(ref) {
		return nil, invalid("seccomp", "localhost profile %q is not an absolute path", ref)
	}
	b, err := os.ReadFile(ref)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("seccomp localhost profile %q: %w", ref, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("seccomp localhost profile %q: %w", ref, err)
	}
	return b, nil
}

// deviceDirsSkipped are /dev entries that are per-container mounts, not
// devices to copy.
var deviceDirsSkipped = map[string]bool{
	"/dev/pts": true, "/dev/shm": true, "/dev/mqueue": true, "/dev/fd": true,
	"/dev/.lxc": true, "/dev/.lxd-mounts": true, "/dev/.udev": true,
}

// HostDevices lists the host's device nodes for privileged containers.
func HostDevices() ([]specs.LinuxDevice, error) {
	var out []specs.LinuxDevice
	err := filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			if deviceDirsSkipped[p] {
				return filepath.SkipDir
			}
			return nil
		}
		if p == "/dev/console" {
			return nil
		}
		dev, ok, err := deviceAt(p, p)
		if err != nil || !ok {
			return nil
		}
		out = append(out, dev)
		return nil
	})
	return out, err
}

// deviceAt stats hostPath (following symlinks) and describes it at
// containerPath; ok is false when it is not a device node.
func deviceAt(hostPath, containerPath string) (specs.LinuxDevice, bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(hostPath, &st); err != nil {
		return specs.LinuxDevice{}, false, &os.PathError{Op: "stat", Path: hostPath, Err: err}
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	case unix.S_IFIFO:
		typ = "p"
	default:
		return specs.LinuxDevice{}, false, nil
	}
	mode := os.FileMode(st.Mode &^ unix.S_IFMT)
	uid, gid := st.Uid, st.Gid
	return specs.LinuxDevice{
		Path: containerPath, Type: typ,
		Major: int64(unix.Major(uint64(st.Rdev))), Minor: int64(unix.Minor(uint64(st.Rdev))),
		FileMode: &mode, UID: &uid, GID: &gid,
	}, true, nil
}

// ResolveDevices stats the config's devices on the host. A directory exposes
// every device node below it at the same relative path, like containerd.
func ResolveDevices(devs []*runtimeapi.Device) ([]Device, error) {
	var out []Device
	for _, d := range devs {
		host, ctr := d.GetHostPath(), d.GetContainerPath()
		if ctr == "" {
			ctr = host
		}
		if !filepath.IsAbs(host) || !path.IsAbs(ctr) || hasDotDot(ctr) {
			return nil, invalid("devices", "host %q and container %q paths must be absolute (container without ..)", host, ctr)
		}
		st, err := os.Stat(host)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("device %q: %w", host, errdefs.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("device %q: %w", host, err)
		}
		if !st.IsDir() {
			ld, ok, err := deviceAt(host, ctr)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, invalid("devices", "%q is not a device node", host)
			}
			out = append(out, Device{LinuxDevice: ld, Permissions: d.GetPermissions()})
			continue
		}
		err = filepath.WalkDir(host, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			rel, err := filepath.Rel(host, p)
			if err != nil {
				return err
			}
			ld, ok, err := deviceAt(p, path.Join(ctr, filepath.ToSlash(rel)))
			if err != nil || !ok {
				return err
			}
			out = append(out, Device{LinuxDevice: ld, Permissions: d.GetPermissions()})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("device directory %q: %w", host, err)
		}
	}
	return out, nil
}
