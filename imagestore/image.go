package imagestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/storage"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

// ImageInfo is what container creation needs to know about an image.
type ImageInfo struct {
	// ID is the storage image ID (hex SHA-256 of the config), the value
	// PullImage returns and ImageStatus reports.
	ID string
	// ManifestDigest is the digest of the manifest the image was pulled by.
	ManifestDigest string
	RepoTags       []string
	RepoDigests    []string
	// Size is the unpacked size of the image's layers plus metadata.
	Size uint64
	// UID is set when the image's User names a numeric user; Username when
	// it names one by name (resolved inside the container's /etc/passwd).
	UID      *int64
	Username string
	Pinned   bool
	// Annotations are the OCI manifest's annotations.
	Annotations map[string]string
	// Config is the OCI image config: Entrypoint, Cmd, Env, WorkingDir,
	// User, StopSignal, Volumes, Labels, ExposedPorts.
	Config imgspecv1.ImageConfig
	// Platform of the image ("linux/amd64").
	OS, Architecture string
}

// imageConfig is the immutable part of an image, cached by image ID.
type imageConfig struct {
	oci         imgspecv1.Image
	annotations map[string]string
	size        int64
	// names is the last reported view of the image's names: parsing them
	// (regular expressions per name) was a third of an ImageStatus or
	// ListImages, and names change only by a pull, a tag removal or
	// another tool.
	names atomic.Pointer[nameView]
}

// nameView is what an image's names report as tags and digests.
type nameView struct {
	names, history []string
	digest         digest.Digest
	tags, digests  []string
}

// reported returns img's tags and digests as the CRI reports them, parsed
// again only when its names changed since the last call.
func (c *imageConfig) reported(img *storage.Image) (tags, digests []string) {
	if v := c.names.Load(); v != nil && v.digest == img.Digest &&
		slices.Equal(v.names, img.Names) && slices.Equal(v.history, img.NamesHistory) {
		// Copies: the caller's message may outlive another update.
		return slices.Clone(v.tags), slices.Clone(v.digests)
	}
	tags, digests = splitNames(img.Names, img.Digest)
	if len(tags) == 0 && len(digests) == 0 {
		digests = previousNameDigest(img)
	}
	c.names.Store(&nameView{
		names: slices.Clone(img.Names), history: slices.Clone(img.NamesHistory), digest: img.Digest,
		tags: slices.Clone(tags), digests: slices.Clone(digests),
	})
	return tags, digests
}

// Resolve finds a stored image by ID ("<hex>" or "sha256:<hex>"), by tag
// or by digest, for container creation. Unknown images are ErrNotFound.
func (s *Store) Resolve(ctx context.Context, ref string) (*ImageInfo, error) {
	img, err := s.lookup(ref)
	if err != nil {
		return nil, err
	}
	info, _, err := s.info(ctx, img)
	return info, err
}

// Status returns the CRI view of a stored image and, when verbose, the
// "info" entry (the OCI image config as JSON, as containerd and CRI-O
// report it). Unknown images are ErrNotFound; the CRI layer turns that into
// an empty response, as the CRI requires.
func (s *Store) Status(ctx context.Context, ref string, verbose bool) (*runtimeapi.Image, map[string]string, error) {
	img, err := s.lookup(ref)
	if err != nil {
		return nil, nil, err
	}
	info, cfg, err := s.info(ctx, img)
	if err != nil {
		// A RemoveImage that won the race deletes the image between the
		// lookup and reading its config: it is simply gone now.
		if _, gerr := s.store.Image(img.ID); errors.Is(gerr, storage.ErrImageUnknown) {
			return nil, nil, storageErr("image "+ref, gerr)
		}
		return nil, nil, err
	}
	if !verbose {
		// The kubelet asks before every container creation: the config's
		// JSON would be most of the call's CPU.
		return info.CRI(), nil, nil
	}
	infoJSON, err := json.Marshal(struct {
		ID             string          `json:"id"`
		ManifestDigest string          `json:"manifestDigest,omitempty"`
		ImageSpec      imgspecv1.Image `json:"imageSpec"`
	}{info.ID, info.ManifestDigest, cfg.oci})
	if err != nil {
		return nil, nil, fmt.Errorf("encoding image info: %w", err)
	}
	return info.CRI(), map[string]string{"info": string(infoJSON)}, nil
}

// List returns every image, or with filter.Image set only the image that
// reference names (none if it is not stored).
func (s *Store) List(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	if want := filter.GetImage().GetImage(); want != "" {
		img, err := s.lookup(want)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		info, _, err := s.info(ctx, img)
		if err != nil {
			return nil, err
		}
		return []*runtimeapi.Image{info.CRI()}, nil
	}
	images, err := s.store.Images()
	if err != nil {
		return nil, storageErr("listing images", err)
	}
	out := make([]*runtimeapi.Image, 0, len(images))
	for i := range images {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		info, _, err := s.info(ctx, &images[i])
		if err != nil {
			// A shared store can hold things that are not runnable images
			// (another tool's artifacts, an image being deleted); they are
			// not the kubelet's business.
			s.log.DebugContext(ctx, "skipping image", "id", images[i].ID, "err", err)
			continue
		}
		out = append(out, info.CRI())
	}
	return out, nil
}

// Warm reads every image's config, size and names into the caches that
// ImageStatus and ListImages answer from, as containerd's CRI plugin loads
// its image records at start. Without it the first ListImages after a
// restart read each image from storage under its locks: 8.9 ms in the
// bench (issue 20), and the kubelet lists images right after it connects.
func (s *Store) Warm(ctx context.Context) {
	start := time.Now()
	images, err := s.store.Images()
	if err != nil {
		s.log.WarnContext(ctx, "image caches not warmed", "err", storageErr("listing images", err))
		return
	}
	for i := range images {
		if ctx.Err() != nil {
			return
		}
		// What cannot be read is skipped, as List skips it; the info
		// itself is not needed, only what reading it caches.
		_, _, _ = s.info(ctx, &images[i])
	}
	s.log.DebugContext(ctx, "image caches warmed", "images", len(images), "duration", time.Since(start))
}

// Remove deletes an image. Given a tag of an image that has other names,
// it removes just that tag; given an ID or digest, the whole image. An
// image that is not there is not an error. An image a container uses is
// ErrPrecondition.
func (s *Store) Remove(ctx context.Context, ref string) error {
	lr, err := parseLocalRef(ref)
	if err != nil {
		return err
	}
	s.removeMu.Lock()
	defer s.removeMu.Unlock()
	img, err := s.lookupParsed(lr, ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if lr.named != nil {
		if _, byDigest := lr.named.(reference.Canonical); !byDigest && len(img.Names) > 1 {
			if err := s.store.RemoveNames(img.ID, []string{lr.named.String()}); err != nil {
				return storageErr("untagging "+lr.named.String(), err)
			}
			s.log.InfoContext(ctx, "untagged image", "id", img.ID, "tag", lr.named.String())
			return nil
		}
	}
	if _, err := s.store.DeleteImage(img.ID, true); err != nil {
		if errors.Is(err, storage.ErrImageUnknown) || errors.Is(err, storage.ErrNotAnImage) {
			return nil
		}
		return storageErr("removing image "+img.ID, err)
	}
	s.configs.Delete(img.ID)
	s.log.InfoContext(ctx, "removed image", "id", img.ID, "names", img.Names)
	return nil
}

// CRI renders the info as the CRI's Image message.
func (i *ImageInfo) CRI() *runtimeapi.Image {
	img := &runtimeapi.Image{
		Id:          i.ID,
		RepoTags:    i.RepoTags,
		RepoDigests: i.RepoDigests,
		Size:        i.Size,
		Username:    i.Username,
		Spec:        &runtimeapi.ImageSpec{Image: i.ID, Annotations: i.Annotations},
		Pinned:      i.Pinned,
	}
	if i.UID != nil {
		img.Uid = &runtimeapi.Int64Value{Value: *i.UID}
	}
	return img
}

func (s *Store) lookup(ref string) (*storage.Image, error) {
	lr, err := parseLocalRef(ref)
	if err != nil {
		return nil, err
	}
	return s.lookupParsed(lr, ref)
}

func (s *Store) lookupParsed(lr localRef, ref string) (*storage.Image, error) {
	if lr.id != "" {
		img, err := s.store.Image(lr.id)
		if err != nil {
			return nil, storageErr("image "+ref, err)
		}
		return img, nil
	}
	if canonical, ok := lr.named.(reference.Canonical); ok {
		images, err := s.store.ImagesByDigest(canonical.Digest())
		if err != nil {
			return nil, storageErr("image "+ref, err)
		}
		repo := reference.TrimNamed(canonical).String()
		for _, img := range images {
			for _, name := range slices.Concat(img.Names, img.NamesHistory) {
				if n, err := reference.ParseNormalizedNamed(name); err == nil && reference.TrimNamed(n).String() == repo {
					return img, nil
				}
			}
		}
		return nil, fmt.Errorf("image %s: %w", ref, errdefs.ErrNotFound)
	}
	img, err := s.store.Image(lr.named.String())
	if err != nil {
		return nil, storageErr("image "+ref, err)
	}
	return img, nil
}

// info combines an image's mutable names with its cached config.
func (s *Store) info(ctx context.Context, img *storage.Image) (*ImageInfo, *imageConfig, error) {
	cfg, err := s.config(ctx, img.ID)
	if err != nil {
		return nil, nil, err
	}
	tags, digests := cfg.reported(img)
	info := &ImageInfo{
		ID:             img.ID,
		ManifestDigest: img.Digest.String(),
		RepoTags:       tags,
		RepoDigests:    digests,
		Size:           uint64(max(cfg.size, 0)),
		Annotations:    cfg.annotations,
		Config:         cfg.oci.Config,
		OS:             cfg.oci.OS,
		Architecture:   cfg.oci.Architecture,
	}
	info.UID, info.Username = parseImageUser(cfg.oci.Config.User)
	// A pinned name may be a tag or a digest, so compare what is reported.
	pinned := s.cur().pinned
	for _, name := range slices.Concat(tags, digests) {
		if pinned.match(name) {
			info.Pinned = true
		}
	}
	return info, cfg, nil
}

func (s *Store) config(ctx context.Context, id string) (*imageConfig, error) {
	if c, ok := s.configs.Load(id); ok {
		return c.(*imageConfig), nil
	}
	ref, err := s.imageRef(id)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", id, err)
	}
	src, err := ref.NewImage(ctx, s.systemContext())
	if err != nil {
		return nil, storageErr("opening image "+id, err)
	}
	defer func() { _ = src.Close() }()
	oci, err := src.OCIConfig(ctx)
	if err != nil {
		return nil, storageErr("reading config of image "+id, err)
	}
	raw, mime, err := src.Manifest(ctx)
	if err != nil {
		raw, mime = nil, ""
	}
	cfg, err := s.newImageConfig(id, oci, raw, mime)
	if err != nil {
		return nil, err
	}
	s.configs.Store(id, cfg)
	return cfg, nil
}

// newImageConfig is the cache entry of image id: its config, the
// annotations of its manifest raw (of type mime) when that is an OCI
// manifest, and its size in storage.
func (s *Store) newImageConfig(id string, oci *imgspecv1.Image, raw []byte, mime string) (*imageConfig, error) {
	cfg := &imageConfig{oci: *oci}
	if manifest.NormalizedMIMEType(mime) == imgspecv1.MediaTypeImageManifest {
		if m, err := manifest.OCI1FromManifest(raw); err == nil && len(m.Annotations) > 0 {
			cfg.annotations = m.Annotations
		}
	}
	size, err := s.store.ImageSize(id)
	if err != nil {
		return nil, storageErr("sizing image "+id, err)
	}
	cfg.size = size
	return cfg, nil
}

// previousNameDigest names an image that lost its last tag (the tag moved
// to a newer pull, or was removed) by its former repository and manifest
// digest, as CRI-O does: the kubelet can then still show it, reference it
// and garbage-collect it.
func previousNameDigest(img *storage.Image) []string {
	if img.Digest == "" {
		return nil
	}
	for _, name := range img.NamesHistory {
		if n, err := reference.ParseNormalizedNamed(name); err == nil {
			return []string{reference.TrimNamed(n).String() + "@" + img.Digest.String()}
		}
	}
	return nil
}

// parseImageUser splits an image's User ("uid", "name", "uid:gid",
// "name:group") into the CRI's uid or username; the group is not reported.
func parseImageUser(user string) (*int64, string) {
	u, _, _ := strings.Cut(user, ":")
	if u == "" {
		return nil, ""
	}
	if uid, err := strconv.ParseInt(u, 10, 64); err == nil && uid >= 0 {
		return &uid, ""
	}
	return nil, u
}
