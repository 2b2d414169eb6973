package imagestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	drivers "go.podman.io/storage/drivers"
)

// transientRecords counts the records a transient store keeps in runRoot
// (go.podman.io/storage writes its volatile containers and layers there as
// <driver>-containers/volatile-containers.json and
// <driver>-layers/volatile-layers.json). Unreadable files count as one: a
// record that might exist must not be ignored.
func transientRecords(runRoot string) int {
	var files []string
	for _, pattern := range []string{"*-containers/volatile-containers.json", "*-layers/volatile-layers.json"} {
		m, _ := filepath.Glob(filepath.Join(runRoot, pattern))
		files = append(files, m...)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var records []json.RawMessage
		if err != nil || json.Unmarshal(b, &records) != nil {
			n++
			continue
		}
		n += len(records)
	}
	return n
}

// CollectOrphanLayers removes what no storage record names under Root:
// after a reboot, the layer directories of the container filesystems the
// transient store recorded in the run root, and storage's data
// directories of those containers (go.podman.io/storage's
// GarbageCollect, which CRI-O runs at every start for the same reason).
// It returns the IDs of the orphaned layer directories; with dryRun it
// only lists them. It runs whether the store is transient now or not: a
// store switched back to durable still has the last transient boot's
// layers to collect.
//
// Only at start, before anything is created, and only where every user of
// Root shares the run root and the transient setting: a layer recorded
// under another run root looks orphaned here (docs/images.md).
func (s *Store) CollectOrphanLayers(ctx context.Context, dryRun bool) ([]string, error) {
	driver, err := s.store.GraphDriver()
	if err != nil {
		return nil, fmt.Errorf("graph driver: %w", err)
	}
	dirs, err := driver.ListLayers()
	if errors.Is(err, drivers.ErrNotSupported) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing layer directories: %w", err)
	}
	layers, err := s.store.Layers()
	if err != nil {
		return nil, storageErr("listing layers", err)
	}
	known := make(map[string]bool, len(layers))
	for _, l := range layers {
		known[l.ID] = true
	}
	var orphans []string
	for _, id := range dirs {
		if !known[id] {
			orphans = append(orphans, id)
		}
	}
	if dryRun {
		return orphans, nil
	}
	// GarbageCollect removes every layer directory and container data
	// directory no record names, under the store's locks.
	if err := s.store.GarbageCollect(); err != nil {
		return orphans, fmt.Errorf("removing orphaned layers: %w", err)
	}
	if len(orphans) > 0 {
		s.log.InfoContext(ctx, "removed layer directories no storage record names (container filesystems of the transient store after a reboot)", "layers", len(orphans))
	}
	return orphans, nil
}
