package container

import (
	"slices"

	"github.com/podunit/podunit/oci"
)

// FromOCI adapts an oci.Runtime (runc or crun CLI) to Runtime.
func FromOCI(rt oci.Runtime) Runtime { return ociRuntime{rt} }

type ociRuntime struct{ oci.Runtime }

// RunArgv adds the runtime's own log (runc and crun both take --log and
// --log-format as global flags): the only place a failed start's message
// survives, since the runtime's stderr goes to the container's journal.
func (r ociRuntime) RunArgv(id, bundle, pidFile, logFile string) []string {
	argv := r.Runtime.RunArgv(id, bundle, pidFile)
	return slices.Concat(argv[:1], []string{"--log=" + logFile, "--log-format=json"}, argv[1:])
}

// DeleteArgv reuses the global flags of RunArgv (binary, --root, crun's
// cgroup manager), so ExecStopPost deletes from the same state root.
func (r ociRuntime) DeleteArgv(id string) []string {
	argv := r.Runtime.RunArgv(id, "", "")
	i := slices.Index(argv, "run")
	if i < 1 {
		return nil
	}
	return slices.Concat(argv[:i], []string{"delete", "--force", id})
}
