// Package logs writes the CRI log files the kubelet reads (`kubectl logs`)
// from the journal.
//
// journald is the first sink: systemd connects each container's stdout and
// stderr to journald (two stream connections opened by `podunit _stdio`), so
// no podunit process sits in the data path and a container never blocks on
// podunit. One `journalctl --follow` child for all containers feeds a
// Manager that dispatches entries by CONTAINER_ID to per-container writers.
// Each writer records, durably and after fsyncing the file, the journal
// position of the last entry it wrote and the file offset it reached, so a
// podunit killed at any point resumes without losing or repeating a line.
// docs/logs.md has the whole design.
package logs

import (
	"strconv"
)

// Journal fields every container unit carries through LogExtraFields=. The
// follower selects container output with FieldLog=1; the others name the
// container for operators (`journalctl POD_NAME=web`) and the dispatcher.
const (
	FieldLog              = "PODUNIT_LOG"
	FieldPodNamespace     = "POD_NAMESPACE"
	FieldPodName          = "POD_NAME"
	FieldPodUID           = "POD_UID"
	FieldContainerName    = "CONTAINER_NAME"
	FieldContainerID      = "CONTAINER_ID"
	FieldContainerAttempt = "CONTAINER_ATTEMPT"
)

// Journal fields journald itself sets that the follower reads.
const (
	fieldMessage   = "MESSAGE"
	fieldPriority  = "PRIORITY"
	fieldLineBreak = "_LINE_BREAK"
	fieldTransport = "_TRANSPORT"
	fieldCursor    = "__CURSOR"
	fieldRealtime  = "__REALTIME_TIMESTAMP"
)

// Syslog priorities of the two journal streams of a container (the stdio
// wrapper's stream headers). The level prefix is off in those headers, so a
// container cannot change them by printing "<3>".
const (
	PriorityStdout = 6
	PriorityStderr = 3
)

// Identity names a container in the journal.
type Identity struct {
	PodNamespace  string
	PodName       string
	PodUID        string
	ContainerName string
	ContainerID   string
	Attempt       uint32
}

// ExtraFields returns the unit's LogExtraFields= values ("NAME=value"),
// including FieldLog=1 that makes the follower pick the unit's output up.
func ExtraFields(id Identity) []string {
	return []string{
		FieldLog + "=1",
		FieldPodNamespace + "=" + id.PodNamespace,
		FieldPodName + "=" + id.PodName,
		FieldPodUID + "=" + id.PodUID,
		FieldContainerName + "=" + id.ContainerName,
		FieldContainerID + "=" + id.ContainerID,
		FieldContainerAttempt + "=" + strconv.FormatUint(uint64(id.Attempt), 10),
	}
}

// Stream is the CRI stream tag of a line.
type Stream string

// The two CRI streams. TTY containers have only stdout.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// StreamOf maps a journal PRIORITY to the CRI stream: the stderr stream's
// priority (or anything more severe) is stderr, all else stdout.
func StreamOf(priority int) Stream {
	if priority <= PriorityStderr {
		return Stderr
	}
	return Stdout
}
