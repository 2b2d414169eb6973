package imagestore

import (
	"fmt"
	"path"
	"strings"
)

// pinSet is what Options.PinnedImages names: exact references, normalized
// like every reference podunit stores ("busybox" is
// docker.io/library/busybox:latest), and path.Match globs over the full
// name an image is reported under ("registry.k8s.io/*" pins
// registry.k8s.io/pause:3.10; "*" does not cross a "/").
type pinSet struct {
	exact map[string]bool
	globs []string
}

func newPinSet(refs []string) (pinSet, error) {
	p := pinSet{exact: make(map[string]bool, len(refs))}
	for _, r := range refs {
		if strings.ContainsAny(r, "*?[") {
			// A glob is no reference: it is matched as written, so it
			// must spell the name out as images are reported.
			if _, err := path.Match(r, ""); err != nil {
				return pinSet{}, fmt.Errorf("pinned image glob %q: %w", r, err)
			}
			p.globs = append(p.globs, r)
			continue
		}
		named, err := NormalizeReference(r)
		if err != nil {
			return pinSet{}, fmt.Errorf("pinned image %q: %w", r, err)
		}
		p.exact[named.String()] = true
	}
	return p, nil
}

// match reports whether name (a reported tag or digest reference) is
// pinned.
func (p pinSet) match(name string) bool {
	if p.exact[name] {
		return true
	}
	for _, g := range p.globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
