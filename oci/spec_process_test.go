package oci

import (
	"errors"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// apply runs one option on a bare spec.
func apply(t *testing.T, o SpecOpt) (*specs.Spec, error) {
	t.Helper()
	s := &specs.Spec{}
	return s, o(s)
}

func wantErr(t *testing.T, err, want error) bool {
	t.Helper()
	if want != nil {
		if !errors.Is(err, want) {
			t.Fatalf("err = %v, want %v", err, want)
		}
		return true
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	return false
}

func TestProcessArgs(t *testing.T) {
	img := ImageConfig{Entrypoint: []string{"/ep"}, Cmd: []string{"c1", "c2"}}
	tests := []struct {
		name          string
		img           ImageConfig
		command, args []string
		want          []string
		err           error
	}{
		{name: "image only", img: img, want: []string{"/ep", "c1", "c2"}},
		{name: "args replace cmd", img: img, args: []string{"a"}, want: []string{"/ep", "a"}},
		{name: "command replaces entrypoint and drops cmd", img: img, command: []string{"/bin/sh"}, want: []string{"/bin/sh"}},
		{name: "command and args", img: img, command: []string{"/bin/sh"}, args: []string{"-c", "x"}, want: []string{"/bin/sh", "-c", "x"}},
		{name: "no entrypoint", img: ImageConfig{Cmd: []string{"sh"}}, want: []string{"sh"}},
		{name: "cleared entrypoint", img: ImageConfig{Entrypoint: []string{""}, Cmd: []string{"sh"}}, want: []string{"sh"}},
		{name: "args without image", args: []string{"/x"}, want: []string{"/x"}},
		{name: "nothing", err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withProcessArgs(tt.img, tt.command, tt.args))
			if wantErr(t, err, tt.err) {
				return
			}
			if !slices.Equal(s.Process.Args, tt.want) {
				t.Errorf("args = %q, want %q", s.Process.Args, tt.want)
			}
		})
	}
}

func kv(k, v string) *runtimeapi.KeyValue { return &runtimeapi.KeyValue{Key: k, Value: []byte(v)} }

func TestEnv(t *testing.T) {
	tests := []struct {
		name     string
		image    []string
		hostname string
		envs     []*runtimeapi.KeyValue
		want     []string
		err      error
	}{
		{name: "default path", want: []string{DefaultPath}},
		{
			name: "image then hostname then config, override in place", image: []string{"PATH=/x", "A=1", "B=2"},
			hostname: "h", envs: []*runtimeapi.KeyValue{kv("A", "9"), kv("C", "3=3")},
			want: []string{"PATH=/x", "A=9", "B=2", "HOSTNAME=h", "C=3=3"},
		},
		{name: "config overrides HOSTNAME", hostname: "h", envs: []*runtimeapi.KeyValue{kv("HOSTNAME", "o"), kv("PATH", "/p")}, want: []string{"HOSTNAME=o", "PATH=/p"}},
		{name: "empty name", envs: []*runtimeapi.KeyValue{kv("", "x")}, err: errdefs.ErrInvalid},
		{name: "name with =", envs: []*runtimeapi.KeyValue{kv("A=B", "x")}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withEnv(tt.image, tt.hostname, tt.envs))
			if wantErr(t, err, tt.err) {
				return
			}
			if !slices.Equal(s.Process.Env, tt.want) {
				t.Errorf("env = %q, want %q", s.Process.Env, tt.want)
			}
		})
	}
}

func TestCwd(t *testing.T) {
	tests := []struct {
		image, config, want string
		err                 error
	}{
		{want: "/"},
		{image: "/img", want: "/img"},
		{image: "/img", config: "/cfg", want: "/cfg"},
		{config: "rel", err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		s, err := apply(t, withCwd(tt.image, tt.config))
		if wantErr(t, err, tt.err) {
			continue
		}
		if s.Process.Cwd != tt.want {
			t.Errorf("cwd(%q,%q) = %q, want %q", tt.image, tt.config, s.Process.Cwd, tt.want)
		}
	}
}

func TestTerminalAndRlimits(t *testing.T) {
	s, err := apply(t, withTerminal(true))
	if err != nil || !s.Process.Terminal {
		t.Fatalf("terminal not set: %v", err)
	}
	rl := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 4096}}
	if s, err = apply(t, withRlimits(rl)); err != nil || !slices.Equal(s.Process.Rlimits, rl) {
		t.Fatalf("rlimits = %v, %v", s.Process, err)
	}
	if s, err = apply(t, withRlimits(nil)); err != nil || s.Process != nil {
		t.Fatalf("nil rlimits touched the process: %v %v", s.Process, err)
	}
	for _, bad := range [][]specs.POSIXRlimit{{{Type: "NOFILE"}}, {{Type: "RLIMIT_NOFILE", Soft: 2, Hard: 1}}} {
		if _, err := apply(t, withRlimits(bad)); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%v: err = %v", bad, err)
		}
	}
}

func TestOOMScoreAdj(t *testing.T) {
	floor := -500
	tests := []struct {
		v     int64
		floor *int
		want  int
		err   error
	}{
		{v: 100, want: 100},
		{v: -998, want: -998},
		{v: -998, floor: &floor, want: -500},
		{v: 1000, floor: &floor, want: 1000},
		{v: 1001, err: errdefs.ErrInvalid},
		{v: -1001, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		s, err := apply(t, withOOMScoreAdj(tt.v, tt.floor))
		if wantErr(t, err, tt.err) {
			continue
		}
		if *s.Process.OOMScoreAdj != tt.want {
			t.Errorf("oom(%d) = %d, want %d", tt.v, *s.Process.OOMScoreAdj, tt.want)
		}
	}
}

func TestWithUser(t *testing.T) {
	i64 := func(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }
	tests := []struct {
		name      string
		u         *User
		sc        *runtimeapi.LinuxContainerSecurityContext
		imageUser string
		want      specs.User
		err       error
	}{
		{name: "root default", want: specs.User{}},
		{name: "resolved", u: &User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 1234}}, sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000)},
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 1234}}},
		{name: "group without user", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsGroup: i64(5)}, err: errdefs.ErrInvalid},
		{name: "negative uid", u: &User{}, sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(-1)}, err: errdefs.ErrInvalid},
		{name: "unresolved image user", imageUser: "nobody", err: errdefs.ErrInvalid},
		{name: "unresolved run_as_user", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1)}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := apply(t, withUser(tt.u, tt.sc, tt.imageUser))
			if wantErr(t, err, tt.err) {
				return
			}
			got := s.Process.User
			if got.UID != tt.want.UID || got.GID != tt.want.GID || !slices.Equal(got.AdditionalGids, tt.want.AdditionalGids) {
				t.Errorf("user = %+v, want %+v", got, tt.want)
			}
		})
	}
}
