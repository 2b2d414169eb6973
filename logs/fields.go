// Package logs holds what podunit and its log relay share about container
// output: the CRI log line format the kubelet parses (the relay, package
// logrelay, writes the files) and the journal fields a container unit
// carries, so operators find its lines in journald.
// docs/logs.md has the whole design.
package logs

import (
	"strconv"
)

// Journal fields every container unit carries through LogExtraFields=:
// FieldLog=1 marks container output, the others name the container for
// operators (`journalctl POD_NAME=web`, `journalctl CONTAINER_ID=...`).
const (
	FieldLog              = "PODUNIT_LOG"
	FieldPodNamespace     = "POD_NAMESPACE"
	FieldPodName          = "POD_NAME"
	FieldPodUID           = "POD_UID"
	FieldContainerName    = "CONTAINER_NAME"
	FieldContainerID      = "CONTAINER_ID"
	FieldContainerAttempt = "CONTAINER_ATTEMPT"
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

// ExtraFields returns the unit's LogExtraFields= values ("NAME=value").
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
