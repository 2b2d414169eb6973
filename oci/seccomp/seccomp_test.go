package seccomp

import (
	"errors"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/errdefs"
)

func allowed(s *specs.LinuxSeccomp, name string) bool {
	for _, sc := range s.Syscalls {
		if sc.Action == specs.ActAllow && len(sc.Args) == 0 && slices.Contains(sc.Names, name) {
			return true
		}
	}
	return false
}

func hasRule(s *specs.LinuxSeccomp, name string, action specs.LinuxSeccompAction) bool {
	for _, sc := range s.Syscalls {
		if sc.Action == action && slices.Contains(sc.Names, name) {
			return true
		}
	}
	return false
}

func TestDefaultProfile(t *testing.T) {
	tests := []struct {
		name      string
		filter    Filter
		allow     []string
		deny      []string
		arches    []specs.Arch
		cloneArgs bool // clone allowed only with namespace-flag check
	}{
		{
			name:      "amd64 default caps",
			filter:    Filter{Arch: "amd64", Caps: []string{"CAP_CHOWN", "CAP_NET_RAW"}},
			allow:     []string{"read", "arch_prctl", "modify_ldt", "ptrace"},
			deny:      []string{"sethostname", "mount", "unshare", "reboot", "chroot", "cacheflush"},
			arches:    []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
			cloneArgs: true,
		},
		{
			name:   "amd64 SYS_ADMIN",
			filter: Filter{Arch: "amd64", Caps: []string{"CAP_SYS_ADMIN", "CAP_SYS_CHROOT"}},
			allow:  []string{"sethostname", "mount", "clone", "clone3", "unshare", "chroot"},
			deny:   []string{"reboot", "init_module"},
			arches: []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
		},
		{
			name:      "arm64",
			filter:    Filter{Arch: "arm64"},
			allow:     []string{"cacheflush", "set_tls"},
			deny:      []string{"arch_prctl", "modify_ldt"},
			arches:    []specs.Arch{specs.ArchAARCH64, specs.ArchARM},
			cloneArgs: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Default(tt.filter)
			if s.DefaultAction != specs.ActErrno || s.DefaultErrnoRet == nil || *s.DefaultErrnoRet != 1 {
				t.Fatalf("default action = %v/%v, want ERRNO/EPERM", s.DefaultAction, s.DefaultErrnoRet)
			}
			if !slices.Equal(s.Architectures, tt.arches) {
				t.Errorf("architectures = %v, want %v", s.Architectures, tt.arches)
			}
			for _, n := range tt.allow {
				if !allowed(s, n) {
					t.Errorf("%s not allowed", n)
				}
			}
			for _, n := range tt.deny {
				if allowed(s, n) {
					t.Errorf("%s allowed", n)
				}
			}
			if got := hasRule(s, "clone3", specs.ActErrno); got != tt.cloneArgs {
				t.Errorf("clone3 ENOSYS rule present = %v, want %v", got, tt.cloneArgs)
			}
		})
	}
}

func TestDefaultEveryArch(t *testing.T) {
	for goarch := range seccompArch {
		if s := Default(Filter{Arch: goarch}); len(s.Syscalls) == 0 {
			t.Errorf("%s: empty profile", goarch)
		}
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		wantErr error
		check   func(*testing.T, *specs.LinuxSeccomp)
	}{
		{
			name: "critest block chmod",
			json: `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["chmod","fchmodat"],"action":"SCMP_ACT_ERRNO"}]}`,
			check: func(t *testing.T, s *specs.LinuxSeccomp) {
				if s.DefaultAction != specs.ActAllow || !hasRule(s, "fchmodat", specs.ActErrno) {
					t.Errorf("got %+v", s)
				}
			},
		},
		{
			name: "legacy name and explicit architectures",
			json: `{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"name":"read","action":"SCMP_ACT_ALLOW"}]}`,
			check: func(t *testing.T, s *specs.LinuxSeccomp) {
				if !allowed(s, "read") || !slices.Equal(s.Architectures, []specs.Arch{specs.ArchX86_64}) {
					t.Errorf("got %+v", s)
				}
			},
		},
		{name: "unknown field", json: `{"defaultAction":"SCMP_ACT_ALLOW","sycalls":[]}`, wantErr: errdefs.ErrInvalid},
		{name: "no default action", json: `{"syscalls":[]}`, wantErr: errdefs.ErrInvalid},
		{name: "not json", json: `defaultAction: allow`, wantErr: errdefs.ErrInvalid},
		{name: "rule without names", json: `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"action":"SCMP_ACT_ERRNO"}]}`, wantErr: errdefs.ErrInvalid},
		{name: "name and names", json: `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"name":"a","names":["b"],"action":"SCMP_ACT_ERRNO"}]}`, wantErr: errdefs.ErrInvalid},
		{name: "rule without action", json: `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"]}]}`, wantErr: errdefs.ErrInvalid},
		{
			name:    "architectures and archMap",
			json:    `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86"],"archMap":[{"architecture":"SCMP_ARCH_X86_64"}]}`,
			wantErr: errdefs.ErrInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Load([]byte(tt.json), Filter{Arch: "amd64"})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s)
		})
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["chmod"],"action":"SCMP_ACT_ERRNO"}]}`))
	f.Add([]byte(`{"defaultAction":"SCMP_ACT_ERRNO","archMap":[{"architecture":"SCMP_ARCH_X86_64"}],"syscalls":[{"names":["a"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_X"]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Load(data, Filter{Arch: "amd64"})
		if err == nil && s.DefaultAction == "" {
			t.Fatal("accepted a profile without default action")
		}
	})
}
