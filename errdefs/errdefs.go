// Package errdefs holds the sentinel errors podunit's packages wrap, so the CRI
// layer can map them to gRPC codes in one place without inner packages
// importing grpc/status.
package errdefs

import "errors"

var (
	// ErrNotFound: the object (pod, container, image, unit) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request is malformed or names something hostile.
	ErrInvalid = errors.New("invalid argument")
	// ErrExists: the object or its reserved name already exists.
	ErrExists = errors.New("already exists")
	// ErrPrecondition: the object is in a state that does not allow the call.
	ErrPrecondition = errors.New("failed precondition")
	// ErrUnavailable: a dependency (systemd's bus, a registry) cannot be reached.
	ErrUnavailable = errors.New("unavailable")
	// ErrPermission: a registry or the host refused access.
	ErrPermission = errors.New("permission denied")
	// ErrDeadline: a dependency did not answer in time.
	ErrDeadline = errors.New("deadline exceeded")
	// ErrResourceExhausted: disk full, too many concurrent operations.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrUnimplemented: the feature is not supported on this host or handler.
	ErrUnimplemented = errors.New("unimplemented")
)
