// Package idindex is podunit's one rule for naming a pod or container by
// ID: the full ID, or a prefix of exactly one ID. containerd's CRI accepts
// unique prefixes on every RPC (its truncindex) and crictl relies on it;
// the kubelet always sends full IDs, so it never meets the ambiguity.
package idindex

import (
	"fmt"

	"github.com/podunit/podunit/errdefs"
)

// Resolve returns the ID in ids that ref names. kind ("container", "pod
// sandbox") only words the errors: an empty or ambiguous ref wraps
// errdefs.ErrInvalid, one that names nothing errdefs.ErrNotFound.
func Resolve[V any](kind, ref string, ids map[string]V) (string, error) {
	if ref == "" {
		return "", fmt.Errorf("%s id is required: %w", kind, errdefs.ErrInvalid)
	}
	if _, ok := ids[ref]; ok {
		return ref, nil
	}
	var found string
	for id := range ids {
		if len(id) > len(ref) && id[:len(ref)] == ref {
			if found != "" {
				return "", fmt.Errorf("%s id prefix %q is ambiguous: %w", kind, ref, errdefs.ErrInvalid)
			}
			found = id
		}
	}
	if found == "" {
		return "", fmt.Errorf("%s %q: %w", kind, ref, errdefs.ErrNotFound)
	}
	return found, nil
}
