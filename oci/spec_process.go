package oci

import (
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ProcessArgs merges the image's Entrypoint/Cmd with the CRI command/args the
// way the kubelet expects (Docker semantics): a command replaces the
// entrypoint and drops the image's Cmd; args replace Cmd.
func ProcessArgs(img ImageConfig, command, args []string) ([]string, error) {
	var out []string
	if len(command) > 0 {
		out = append(slices.Clone(command), args...)
	} else {
		if len(args) == 0 {
			args = img.Cmd
		}
		// An entrypoint of [""] is how images clear an inherited one.
		if !(len(img.Entrypoint) == 1 && img.Entrypoint[0] == "") {
			out = slices.Clone(img.Entrypoint)
		}
		out = append(out, args...)
	}
	if len(out) == 0 {
		return nil, invalid("command", "neither the config nor the image specifies a command")
	}
	return out, nil
}

func withProcessArgs(img ImageConfig, command, args []string) SpecOpt {
	return func(s *specs.Spec) error {
		a, err := ProcessArgs(img, command, args)
		if err != nil {
			return err
		}
		process(s).Args = a
		return nil
	}
}

// withEnv layers image env, HOSTNAME, then config env; a later value for the
// same name replaces the earlier one in place.
func withEnv(imageEnv []string, hostname string, envs []*runtimeapi.KeyValue) SpecOpt {
	return func(s *specs.Spec) error {
		var env []string
		set := func(kv string) {
			name, _, _ := strings.Cut(kv, "=")
			for i, e := range env {
				if n, _, _ := strings.Cut(e, "="); n == name {
					env[i] = kv
					return
				}
			}
			env = append(env, kv)
		}
		for _, e := range imageEnv {
			set(e)
		}
		if hostname != "" {
			set("HOSTNAME=" + hostname)
		}
		for i, kv := range envs {
			if kv.GetKey() == "" || strings.Contains(kv.GetKey(), "=") {
				return invalid("envs", "entry %d has an invalid name %q", i, kv.GetKey())
			}
			set(kv.GetKey() + "=" + string(kv.GetValue()))
		}
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
			env = append([]string{DefaultPath}, env...)
		}
		process(s).Env = env
		return nil
	}
}

func withCwd(imageDir, configDir string) SpecOpt {
	return func(s *specs.Spec) error {
		dir := configDir
		if dir == "" {
			dir = imageDir
		}
		if dir == "" {
			dir = "/"
		}
		if !path.IsAbs(dir) {
			return invalid("working_dir", "%q is not absolute", dir)
		}
		process(s).Cwd = dir
		return nil
	}
}

func withTerminal(tty bool) SpecOpt {
	return func(s *specs.Spec) error {
		process(s).Terminal = tty
		return nil
	}
}

func withRlimits(rl []specs.POSIXRlimit) SpecOpt {
	return func(s *specs.Spec) error {
		for _, r := range rl {
			if !strings.HasPrefix(r.Type, "RLIMIT_") {
				return invalid("rlimits", "unknown type %q", r.Type)
			}
			if r.Soft > r.Hard {
				return invalid("rlimits", "%s soft limit %d above hard limit %d", r.Type, r.Soft, r.Hard)
			}
		}
		if len(rl) > 0 {
			process(s).Rlimits = slices.Clone(rl)
		}
		return nil
	}
}

// withUser sets the resolved identity. It re-checks what needs no lookup so a
// caller that skipped ResolveUser still gets the CRI's validation.
func withUser(u *User, sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) SpecOpt {
	return func(s *specs.Spec) error {
		if err := validateRunAs(sc); err != nil {
			return err
		}
		if u == nil {
			if sc.GetRunAsUser() != nil || sc.GetRunAsUsername() != "" || imageUser != "" || len(sc.GetSupplementalGroups()) > 0 {
				return invalid("user", "not resolved against the image (ResolveUser)")
			}
			u = &User{}
		}
		process(s).User = specs.User{
			UID:            u.UID,
			GID:            u.GID,
			AdditionalGids: slices.Clone(u.AdditionalGids),
		}
		return nil
	}
}

func validateRunAs(sc *runtimeapi.LinuxContainerSecurityContext) error {
	if sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
		return invalid("run_as_group", "set without run_as_user or run_as_username")
	}
	if v := sc.GetRunAsUser(); v != nil && (v.GetValue() < 0 || v.GetValue() > maxID) {
		return invalid("run_as_user", "%d out of range", v.GetValue())
	}
	if v := sc.GetRunAsGroup(); v != nil && (v.GetValue() < 0 || v.GetValue() > maxID) {
		return invalid("run_as_group", "%d out of range", v.GetValue())
	}
	for _, g := range sc.GetSupplementalGroups() {
		if g < 0 || g > maxID {
			return invalid("supplemental_groups", "%d out of range", g)
		}
	}
	return nil
}

// maxID: 2^32-1 is the kernel's "no id" value, never a real one.
const maxID = 1<<32 - 2

func withOOMScoreAdj(v int64, floor *int) SpecOpt {
	return func(s *specs.Spec) error {
		if v < -1000 || v > 1000 {
			return invalid("oom_score_adj", "%d outside [-1000, 1000]", v)
		}
		adj := int(v)
		if floor != nil && adj < *floor {
			adj = *floor
		}
		process(s).OOMScoreAdj = &adj
		return nil
	}
}
