package imagestore

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FsInfo reports what images and container writable layers use, for the
// kubelet's image GC and eviction. Both live under Root, which is reported
// as the mount point of each; the kubelet sees one filesystem (no split
// image filesystem). Layers are measured by walking them, which costs
// time in proportion to the files stored.
func (s *Store) FsInfo(ctx context.Context) (imageFs, containerFs []*runtimeapi.FilesystemUsage, err error) {
	driver, err := s.store.GraphDriver()
	if err != nil {
		return nil, nil, fmt.Errorf("graph driver: %w", err)
	}
	layers, err := s.store.Layers()
	if err != nil {
		return nil, nil, storageErr("listing layers", err)
	}
	containers, err := s.store.Containers()
	if err != nil {
		return nil, nil, storageErr("listing containers", err)
	}
	writable := make(map[string]bool, len(containers))
	for _, c := range containers {
		writable[c.LayerID] = true
	}
	var img, ctr struct{ bytes, inodes uint64 }
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		du, err := driver.ReadWriteDiskUsage(l.ID)
		if err != nil {
			// A layer deleted while walking is simply no longer used space.
			continue
		}
		acc := &img
		if writable[l.ID] {
			acc = &ctr
		}
		acc.bytes += uint64(max(du.Size, 0))
		acc.inodes += uint64(max(du.InodeCount, 0))
	}
	now := time.Now().UnixNano()
	usage := func(bytes, inodes uint64) *runtimeapi.FilesystemUsage {
		return &runtimeapi.FilesystemUsage{
			Timestamp:  now,
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: s.opts.Root},
			UsedBytes:  &runtimeapi.UInt64Value{Value: bytes},
			InodesUsed: &runtimeapi.UInt64Value{Value: inodes},
		}
	}
	return []*runtimeapi.FilesystemUsage{usage(img.bytes, img.inodes)},
		[]*runtimeapi.FilesystemUsage{usage(ctr.bytes, ctr.inodes)}, nil
}
