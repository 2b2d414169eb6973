//go:build integration

package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testSecurity starts containers from GenerateSpec output and checks, from
// inside, that the runtime applied what the spec says.
func testSecurity(t *testing.T, r *rig) {
	i64 := func(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }

	t.Run("user, groups, seccomp, no_new_privs", func(t *testing.T) {
		r.start("sec1", sleeper(&runtimeapi.LinuxContainerSecurityContext{
			RunAsUser: i64(1000), SupplementalGroups: []int64{1234, 5678}, NoNewPrivs: true,
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		}), nil)
		if out := r.mustExec("sec1", "id", "-u"); out != "1000\n" {
			t.Errorf("id -u = %q", out)
		}
		if out := r.mustExec("sec1", "id", "-G"); !strings.Contains(out, "1234") || !strings.Contains(out, "5678") {
			t.Errorf("id -G = %q", out)
		}
		status := r.mustExec("sec1", "cat", "/proc/self/status")
		if !strings.Contains(status, "Seccomp:\t2") || !strings.Contains(status, "NoNewPrivs:\t1") {
			t.Errorf("status lacks seccomp filter / nnp:\n%s", status)
		}
		if res, _ := r.execSync("sec1", 10*time.Second, "hostname", "x"); res.ExitCode == 0 {
			t.Error("sethostname allowed under RuntimeDefault without SYS_ADMIN")
		}
	})

	t.Run("capabilities, masked and readonly paths, readonly rootfs", func(t *testing.T) {
		r.start("sec2", sleeper(&runtimeapi.LinuxContainerSecurityContext{
			Capabilities: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}},
			// The test rootfs's /bin/ls is a symlink to busybox, which a mask
			// would follow; /etc/group is a plain file.
			MaskedPaths:    []string{"/etc/group"},
			ReadonlyPaths:  []string{"/tmp"},
			ReadonlyRootfs: true,
		}), nil)
		if out := r.mustExec("sec2", "grep", "CapBnd", "/proc/self/status"); !strings.Contains(out, "0000000000000000") {
			t.Errorf("CapBnd = %q", out)
		}
		if out := r.mustExec("sec2", "cat", "/etc/group"); out != "" {
			t.Errorf("masked /etc/group reads %q", out)
		}
		res, _ := r.execSync("sec2", 10*time.Second, "touch", "/tmp/x")
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Read-only file system") {
			t.Errorf("readonly /tmp: %q", res.Stderr)
		}
		res, _ = r.execSync("sec2", 10*time.Second, "touch", "/newfile")
		if res.ExitCode == 0 {
			t.Error("rootfs writable")
		}
		if out := r.mustExec("sec2", "cat", "/etc/resolv.conf"); out != "nameserver 127.0.0.53\n" {
			t.Errorf("resolv.conf = %q", out)
		}
	})

	t.Run("privileged", func(t *testing.T) {
		devs, err := HostDevices()
		if err != nil {
			t.Fatal(err)
		}
		cfg := sleeper(&runtimeapi.LinuxContainerSecurityContext{
			Privileged: true,
			Seccomp:    &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		})
		r.start("priv", cfg, func(in *SpecInput) {
			in.SandboxConfig.Linux = &runtimeapi.LinuxPodSandboxConfig{
				SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true},
			}
			in.Host.Devices = devs
		})
		status := r.mustExec("priv", "cat", "/proc/self/status")
		host, _ := os.ReadFile("/proc/self/status")
		capEff := func(s string) string {
			for _, l := range strings.Split(s, "\n") {
				if strings.HasPrefix(l, "CapEff:") {
					return l
				}
			}
			return ""
		}
		if capEff(status) != capEff(string(host)) || !strings.Contains(status, "Seccomp:\t0") {
			t.Errorf("privileged: %q vs host %q; status:\n%s", capEff(status), capEff(string(host)), status)
		}
		if out := r.mustExec("priv", "grep", " /sys ", "/proc/self/mounts"); !strings.Contains(out, " rw,") {
			t.Errorf("sysfs not writable: %q", out)
		}
		r.mustExec("priv", "test", "-c", "/dev/null")
		r.mustExec("priv", "hostname", "privileged-can")
	})

	t.Run("recursive read-only mount", func(t *testing.T) {
		host := filepath.Join(r.dir, "rro")
		sub := filepath.Join(host, "tmpfs")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("none", sub, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
		r.start("rro", sleeper(nil,
			&runtimeapi.Mount{HostPath: host, ContainerPath: "/mnt", Readonly: true, RecursiveReadOnly: true},
			&runtimeapi.Mount{HostPath: host, ContainerPath: "/mnt2", Readonly: true},
		), nil)
		res, _ := r.execSync("rro", 10*time.Second, "touch", "/mnt/tmpfs/file")
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Read-only file system") {
			t.Errorf("rro submount writable: %+v %q", res, res.Stderr)
		}
		r.mustExec("rro", "touch", "/mnt2/tmpfs/file") // plain ro: submount stays writable
	})
}

func TestIntegrationUserNamespace(t *testing.T) {
	for _, f := range []Flavor{FlavorRunc, FlavorCrun} {
		t.Run(newCLI(f, CLIConfig{}).Name(), func(t *testing.T) {
			r := newRig(t, f)
			// The mapped root is "others" on the host: it must be able to
			// reach the rootfs through the test's private temp dirs.
			for d := r.dir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// Without idmapped mounts the rootfs must belong to the mapped
			// IDs (the chown a userns-aware image store does).
			err := filepath.Walk(r.rootfs, func(p string, _ os.FileInfo, err error) error {
				if err != nil {
					return err
				}
				return os.Lchown(p, 200000, 200000)
			})
			if err != nil {
				t.Fatal(err)
			}
			mapping := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 200000, Length: 65536}}
			r.start("userns", sleeper(&runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping},
				},
			}), nil)
			if out := r.mustExec("userns", "cat", "/proc/self/uid_map"); !strings.Contains(strings.Join(strings.Fields(out), " "), "0 200000 65536") {
				t.Errorf("uid_map = %q", out)
			}
		})
	}
}

func TestIntegrationMountPropagation(t *testing.T) {
	for _, f := range []Flavor{FlavorRunc, FlavorCrun} {
		t.Run(newCLI(f, CLIConfig{}).Name(), func(t *testing.T) {
			r := newRig(t, f)
			src := filepath.Join(r.dir, "prop")
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
			// A private mount of its own, as a host path usually is not.
			if err := unix.Mount("none", src, "tmpfs", 0, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(src, unix.MNT_DETACH) })
			if err := unix.Mount("", src, "", unix.MS_PRIVATE, ""); err != nil {
				t.Fatal(err)
			}
			// Host-to-container propagation needs the host side shared.
			if err := unix.Mount("", src, "", unix.MS_SHARED, ""); err != nil {
				t.Fatal(err)
			}
			r.start("prop", sleeper(nil, &runtimeapi.Mount{
				HostPath: src, ContainerPath: "/prop", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER,
			}), nil)
			late := filepath.Join(src, "late")
			if err := os.Mkdir(late, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("none", late, "tmpfs", 0, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(late, unix.MNT_DETACH) })
			if err := os.WriteFile(filepath.Join(late, "flag"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if out := r.mustExec("prop", "ls", "/prop/late"); out != "flag\n" {
				t.Errorf("host mount made after start not propagated: %q", out)
			}
		})
	}
}
