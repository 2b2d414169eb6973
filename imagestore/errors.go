package imagestore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"syscall"

	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/signature"
	"go.podman.io/storage"

	"github.com/podunit/podunit/errdefs"
)

// classifyPullError wraps a containers/image pull error with the podunit
// sentinel the CRI layer maps to a gRPC code, naming the image and registry
// so the kubelet's event tells the operator where to look.
func classifyPullError(image, registry string, err error) error {
	sentinel := pullErrorKind(err)
	if sentinel == nil {
		return fmt.Errorf("pulling image %s from registry %s: %w", image, registry, err)
	}
	return fmt.Errorf("pulling image %s from registry %s: %w: %w", image, registry, sentinel, err)
}

// pullErrorKind picks the sentinel for err, or nil when none fits.
func pullErrorKind(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return errdefs.ErrDeadline
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errdefs.ErrResourceExhausted
	case errors.Is(err, docker.ErrTooManyRequests):
		return errdefs.ErrUnavailable
	}
	var unauthorized docker.ErrUnauthorizedForCredentials
	if errors.As(err, &unauthorized) {
		return errdefs.ErrPermission
	}
	var policyErr signature.PolicyRequirementError
	if errors.As(err, &policyErr) {
		return errdefs.ErrPermission
	}
	var status docker.UnexpectedHTTPStatusError
	if errors.As(err, &status) {
		return httpStatusKind(status.StatusCode)
	}
	if code := registryErrorCode(err); code != "" {
		switch code {
		case "UNAUTHORIZED", "DENIED":
			return errdefs.ErrPermission
		case "MANIFEST_UNKNOWN", "NAME_UNKNOWN", "BLOB_UNKNOWN":
			return errdefs.ErrNotFound
		case "TOOMANYREQUESTS", "UNAVAILABLE":
			return errdefs.ErrUnavailable
		}
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	if errors.As(err, &dnsErr) || errors.As(err, &opErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return errdefs.ErrUnavailable
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "is blocked in"):
		// registries.conf "blocked = true": a configured refusal.
		return errdefs.ErrPermission
	case strings.Contains(msg, "no image found in manifest list for architecture"),
		strings.Contains(msg, "no image found in image index for architecture"):
		return errdefs.ErrNotFound
	case strings.Contains(msg, "http: server gave HTTP response to HTTPS client"):
		// A plain-HTTP registry not marked insecure in registries.conf.
		return errdefs.ErrUnavailable
	}
	return nil
}

func httpStatusKind(code int) error {
	switch {
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return errdefs.ErrPermission
	case code == http.StatusNotFound:
		return errdefs.ErrNotFound
	case code == http.StatusTooManyRequests, code >= 500:
		return errdefs.ErrUnavailable
	}
	return nil
}

// registryErrorCode returns the OCI distribution error code ("MANIFEST_UNKNOWN",
// "DENIED", ...) carried by err, if any. The carrying type is
// github.com/docker/distribution's errcode.Error, which podunit does not
// require directly (go.podman.io/image does), so it is matched by its method
// set: ErrorCode() returns a value whose String() is the code.
func registryErrorCode(err error) string {
	for _, e := range unwrapAll(err) {
		m := reflect.ValueOf(e).MethodByName("ErrorCode")
		if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
			continue
		}
		if s, ok := m.Call(nil)[0].Interface().(fmt.Stringer); ok {
			return s.String()
		}
	}
	return ""
}

// unwrapAll lists err and every error it wraps, depth first.
func unwrapAll(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		out = append(out, e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	return out
}

// storageErr maps go.podman.io/storage errors to sentinels.
func storageErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrImageUnknown), errors.Is(err, storage.ErrContainerUnknown),
		errors.Is(err, storage.ErrLayerUnknown), errors.Is(err, storage.ErrNotAnImage),
		errors.Is(err, storage.ErrNotAContainer):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrNotFound, err)
	case errors.Is(err, storage.ErrImageUsedByContainer), errors.Is(err, storage.ErrLayerUsedByContainer):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrPrecondition, err)
	case errors.Is(err, storage.ErrDuplicateID), errors.Is(err, storage.ErrDuplicateName):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrExists, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrResourceExhausted, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
