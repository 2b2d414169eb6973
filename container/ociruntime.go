package container

import (
	"slices"

	"github.com/podunit/podunit/oci"
)

// FromOCI adapts an oci.Runtime (runc or crun CLI) to Runtime.
func FromOCI(rt oci.Runtime) Runtime { return ociRuntime{rt} }

type ociRuntime struct{ oci.Runtime }

// split cuts the runtime's `run` command line into its global flags
// (binary, --root, crun's cgroup manager) and the run arguments after the
// subcommand, so create/start/delete reuse exactly the same globals.
func (r ociRuntime) split(id, bundle, pidFile string) (globals, runArgs []string) {
	argv := r.Runtime.RunArgv(id, bundle, pidFile)
	i := slices.Index(argv, "run")
	if i < 1 {
		return argv[:1], nil
	}
	return argv[:i], argv[i+1:]
}

// withLog adds the runtime's own log (runc and crun both take --log and
// --log-format as global flags): the only place a failed start's message
// survives, since the runtime's stderr goes to the container's journal.
func withLog(globals []string, logFile string) []string {
	return slices.Concat(globals[:1], []string{"--log=" + logFile, "--log-format=json"}, globals[1:])
}

// CreateArgv is `create`: the same arguments as `run --detach` without
// --detach (create always returns once the init waits for start).
func (r ociRuntime) CreateArgv(id, bundle, pidFile, logFile string) []string {
	globals, runArgs := r.split(id, bundle, pidFile)
	runArgs = slices.DeleteFunc(slices.Clone(runArgs), func(a string) bool { return a == "--detach" || a == "-d" })
	return slices.Concat(withLog(globals, logFile), []string{"create"}, runArgs)
}

// StartArgv is `start id`.
func (r ociRuntime) StartArgv(id, logFile string) []string {
	globals, _ := r.split(id, "", "")
	return slices.Concat(withLog(globals, logFile), []string{"start", id})
}

// DeleteArgv is `delete --force id`.
func (r ociRuntime) DeleteArgv(id string) []string {
	globals, _ := r.split(id, "", "")
	return slices.Concat(globals, []string{"delete", "--force", id})
}
