package imagestore

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker/reference"

	"github.com/podunit/podunit/errdefs"
)

// imageIDPattern is the form of a go.podman.io/storage image ID: the
// hex-encoded SHA-256 of the image's config, as podman and CRI-O show it.
var imageIDPattern = regexp.MustCompile(`^[a-f0-9]{64}$`)

// NormalizeReference turns an image name as the kubelet or crictl sends it
// into the fully qualified reference the image is pulled and stored under:
// "busybox" becomes "docker.io/library/busybox:latest", a missing tag becomes
// "latest", and a digest wins over a tag given with it (the digest is what
// the user pinned; the tag would only be a hint).
func NormalizeReference(s string) (reference.Named, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty image reference", errdefs.ErrInvalid)
	}
	if s != strings.TrimSpace(s) {
		return nil, fmt.Errorf("%w: image reference %q has surrounding spaces", errdefs.ErrInvalid, s)
	}
	if imageIDPattern.MatchString(trimDigestAlgo(s)) {
		// Docker rejects 64-hex repository names; say why in podunit's words.
		return nil, fmt.Errorf("%w: %q is an image ID, not a reference that can be pulled", errdefs.ErrInvalid, s)
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return nil, fmt.Errorf("%w: image reference %q: %w", errdefs.ErrInvalid, s, err)
	}
	if canonical, ok := named.(reference.Canonical); ok {
		if _, tagged := named.(reference.NamedTagged); tagged {
			named, err = reference.WithDigest(reference.TrimNamed(named), canonical.Digest())
			if err != nil {
				return nil, fmt.Errorf("%w: image reference %q: %w", errdefs.ErrInvalid, s, err)
			}
		}
		return named, nil
	}
	return reference.TagNameOnly(named), nil
}

// trimDigestAlgo strips a "sha256:" prefix, which image IDs may carry when
// they come back from clients that treat them as digests.
func trimDigestAlgo(s string) string {
	return strings.TrimPrefix(s, string(digest.SHA256)+":")
}

// localRef is how a user-supplied string names an image already stored:
// either by ID or by a normalised reference (tagged or digested).
type localRef struct {
	id    string
	named reference.Named
}

// parseLocalRef accepts everything PullImage accepts plus image IDs, with or
// without a "sha256:" prefix.
func parseLocalRef(s string) (localRef, error) {
	if id := trimDigestAlgo(s); imageIDPattern.MatchString(id) {
		return localRef{id: id}, nil
	}
	named, err := NormalizeReference(s)
	if err != nil {
		return localRef{}, err
	}
	return localRef{named: named}, nil
}

// registryOf names the registry a reference is pulled from, for messages.
func registryOf(named reference.Named) string {
	return reference.Domain(named)
}

// splitNames sorts an image's stored names into the CRI's RepoTags and
// RepoDigests. Names stored by digest ("repo@sha256:…") are repo digests;
// every tagged name also yields "repo@<manifest digest>" so that an image
// pulled by tag can be found and reported by digest, as the kubelet expects.
func splitNames(names []string, manifestDigest digest.Digest) (tags, digests []string) {
	seen := map[string]bool{}
	addDigest := func(d string) {
		if !seen[d] {
			seen[d] = true
			digests = append(digests, d)
		}
	}
	for _, n := range names {
		named, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			continue // names podunit cannot parse (another tool's) are not reported
		}
		switch r := named.(type) {
		case reference.Canonical:
			addDigest(reference.TrimNamed(r).String() + "@" + r.Digest().String())
		case reference.NamedTagged:
			tags = append(tags, r.String())
			if manifestDigest != "" {
				addDigest(reference.TrimNamed(r).String() + "@" + manifestDigest.String())
			}
		}
	}
	return tags, digests
}
