package main

import (
	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/logrelay/relayd"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/stdio"
	"github.com/podunit/podunit/streaming"
)

// Helpers that systemd runs for container units. They are subcommands of
// the same binary so a podunit upgrade replaces them together, and they are
// hidden because only podunit's unit definitions call them.
func init() {
	register("_stdio", command{hidden: true, summary: "ExecStart wrapper: connect stdout/stderr to journald streams and exec the OCI runtime", run: stdio.Main})
	register(oci.ExecHelperName, command{hidden: true, summary: "TTY exec helper: run one exec detached and relay its exit code", run: oci.ExecHelperMain})
	register("_logrelay", command{hidden: true, summary: "the node's log relay (podunit-logrelay.service): container output pipes to journald", run: relayd.Main})
	register(streaming.HelperName, command{hidden: true, summary: "the streaming session process (podunit-stream.service): exec, attach and port-forward sessions that outlive podunit", run: streaming.Main})
	register("_exitrec", command{hidden: true, summary: "ExecStopPost helper: record the container's exit durably", run: exitrec.Main})
}
