package imagestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	graphdriver "go.podman.io/storage/drivers"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/layerunpack"
)

// maxParallelDownloads bounds one pull's concurrent layer downloads, as
// containers/image's copy does (its default is 6).
const maxParallelDownloads = 6

// fetch stores the image named refers to and returns its ID (the config
// digest). containers/image's copy to storage decompresses every layer
// twice: once while downloading, to compute its DiffID, and again when
// storage applies it. fetch unpacks each layer into a staging directory of
// storage as its blob arrives, decompressing it and computing its digest
// and DiffID in the same pass, all layers side by side; then it stores
// them in order, each on its parent, once the blob's digest and the
// DiffID are the ones the manifest and the config name. The image record is
// the one containers/image's storage transport writes (the same layer and
// image IDs, manifest and config big data), so podman and skopeo read it
// and it shares layers with images they pulled. Layers already in the
// store are not downloaded. touch is called whenever bytes arrive or
// reach storage.
func (s *Store) fetch(ctx context.Context, named reference.Named, sys *types.SystemContext, policy *signature.PolicyContext, touch func()) (string, error) {
	ref, err := docker.NewReference(named)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errdefs.ErrInvalid, err)
	}
	src, err := ref.NewImageSource(ctx, sys)
	if err != nil {
		return "", err
	}
	defer func() { _ = src.Close() }()

	top := image.UnparsedInstance(src, nil)
	topRaw, topMIME, err := top.Manifest(ctx)
	if err != nil {
		return "", fmt.Errorf("reading manifest: %w", err)
	}
	inst := top
	var listDigest, instDigest digest.Digest
	if manifest.MIMETypeIsMultiImage(topMIME) {
		list, err := manifest.ListFromBlob(topRaw, topMIME)
		if err != nil {
			return "", fmt.Errorf("parsing manifest list: %w", err)
		}
		if instDigest, err = list.ChooseInstance(sys); err != nil {
			return "", err
		}
		if listDigest, err = manifest.Digest(topRaw); err != nil {
			return "", fmt.Errorf("digesting manifest list: %w", err)
		}
		inst = image.UnparsedInstance(src, &instDigest)
	}
	// The policy is checked before anything but the manifest is read, on
	// the image itself, or on the instance chosen from a list, as
	// copy.Image does.
	if err := allowed(ctx, policy, inst); err != nil {
		return "", err
	}
	raw, mime, err := inst.Manifest(ctx)
	if err != nil {
		return "", fmt.Errorf("reading manifest: %w", err)
	}
	if instDigest == "" {
		if instDigest, err = manifest.Digest(raw); err != nil {
			return "", fmt.Errorf("digesting manifest: %w", err)
		}
	}
	switch manifest.NormalizedMIMEType(mime) {
	case manifest.DockerV2Schema2MediaType, imgspecv1.MediaTypeImageManifest:
	default:
		// Docker schema 1 was retired by registries and by containerd 2.1;
		// a nested list is not an image.
		return "", fmt.Errorf("%w: manifest type %q is not supported", errdefs.ErrUnimplemented, mime)
	}
	img, err := image.FromUnparsedImage(ctx, sys, inst)
	if err != nil {
		return "", fmt.Errorf("parsing manifest: %w", err)
	}
	cfgInfo := img.ConfigInfo()
	cfgBlob, err := img.ConfigBlob(ctx) // verified against the manifest
	if err != nil {
		return "", fmt.Errorf("reading image config: %w", err)
	}
	oci, err := img.OCIConfig(ctx)
	if err != nil {
		return "", fmt.Errorf("parsing image config: %w", err)
	}
	layers := img.LayerInfos()
	diffIDs := oci.RootFS.DiffIDs
	if len(diffIDs) != len(layers) {
		return "", fmt.Errorf("broken image: its config lists %d layers, its manifest %d", len(diffIDs), len(layers))
	}
	ids := make([]string, len(layers))
	for i, l := range layers {
		if err := l.Digest.Validate(); err != nil {
			return "", fmt.Errorf("broken image: layer %d: %w", i, err)
		}
		if err := diffIDs[i].Validate(); err != nil {
			return "", fmt.Errorf("broken image: diff ID of layer %d: %w", i, err)
		}
		if strings.HasSuffix(l.MediaType, "+encrypted") {
			return "", fmt.Errorf("%w: layer %s is encrypted", errdefs.ErrUnimplemented, l.Digest)
		}
		parent := ""
		if i > 0 {
			parent = ids[i-1]
		}
		ids[i] = chainLayerID(parent, diffIDs[i])
	}

	dir, err := os.MkdirTemp(tmpDir(s.opts.Root), "pull-")
	if err != nil {
		return "", fmt.Errorf("staging directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	blobs := s.downloadMissing(ctx, src, layers, ids, dir, touch)
	defer blobs.close(s)

	for i := range layers {
		b := blobs.of[i]
		if b == nil {
			continue // in the store already
		}
		<-b.done
		if b.err != nil {
			return "", b.err
		}
		parent := ""
		if i > 0 {
			parent = ids[i-1]
		}
		if err := s.commitLayer(ids[i], parent, layers[i], diffIDs[i], b, touch); err != nil {
			return "", err
		}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	topLayer := ""
	if len(ids) > 0 {
		topLayer = ids[len(ids)-1]
	}
	id, err := s.commitImage(named, cfgInfo.Digest, cfgBlob, oci, topLayer, instDigest, raw, listDigest, topRaw)
	if err != nil {
		return "", err
	}
	// The kubelet asks ImageStatus and creates a container right after a
	// pull: the config is at hand here, storage would have to open the
	// image again for it (manifest, config, sizes).
	if cfg, err := s.newImageConfig(id, oci, raw, mime); err == nil {
		s.configs.Store(id, cfg)
	} else {
		s.log.WarnContext(ctx, "caching the pulled image's config", "id", id, "err", err)
	}
	return id, nil
}

func allowed(ctx context.Context, policy *signature.PolicyContext, img types.UnparsedImage) error {
	ok, err := policy.IsRunningImageAllowed(ctx, img)
	if err == nil && !ok {
		err = errors.New("not allowed by the signature policy")
	}
	if err != nil {
		return fmt.Errorf("source image rejected: %w", err)
	}
	return nil
}

// chainLayerID is the storage ID containers/image gives the layer with
// diffID on top of parent: the first layer's DiffID, then a digest of the
// parent's ID and the DiffID (a chain ID, so equal stacks share layers).
func chainLayerID(parent string, diffID digest.Digest) string {
	if parent == "" {
		return diffID.Encoded()
	}
	return digest.Canonical.FromString(parent + "+" + diffID.Encoded()).Encoded()
}

type blob struct {
	done chan struct{} // closed when staged (or, for putLayer, downloaded) or err is set
	path string
	size int64 // verified against the manifest where it has one
	// staged is the layer unpacked in a staging directory of storage,
	// until commitLayer stores it (then nil).
	staged *graphdriver.DriverWithDifferOutput
	err    error
}

type downloads struct {
	of     []*blob // nil where the layer is in the store
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// close stops the downloads and unpacks still running and gives back the
// staging directories of layers not stored.
func (d *downloads) close(s *Store) {
	d.cancel()
	d.wg.Wait()
	for _, b := range d.of {
		if b != nil && b.staged != nil {
			if err := s.store.CleanupStagedLayer(b.staged); err != nil {
				s.log.Warn("removing an unpacked layer that was not stored", "dir", b.staged.Target, "err", err)
			}
		}
	}
}

// downloadMissing starts fetching the layers not in the store, in order
// and at most maxParallelDownloads at once. With a driver that stages
// (overlay), each is unpacked as it arrives (stage): storage stores a
// layer only on its parent, but unpacking into a staging directory needs
// no parent, so the layers of an image unpack side by side. Otherwise
// (vfs) each blob is downloaded to a file, for putLayer.
func (s *Store) downloadMissing(ctx context.Context, src types.ImageSource, layers []types.BlobInfo, ids []string, dir string, touch func()) *downloads {
	dctx, cancel := context.WithCancel(ctx)
	d := &downloads{of: make([]*blob, len(layers)), cancel: cancel}
	var todo []int
	for i := range layers {
		if _, err := s.store.Layer(ids[i]); err == nil {
			continue
		}
		d.of[i] = &blob{done: make(chan struct{}), path: filepath.Join(dir, strconv.Itoa(i))}
		todo = append(todo, i)
	}
	sem := make(chan struct{}, maxParallelDownloads)
	d.wg.Go(func() {
		for n, i := range todo {
			select {
			case sem <- struct{}{}:
			case <-dctx.Done():
				for _, j := range todo[n:] {
					d.of[j].err = dctx.Err()
					close(d.of[j].done)
				}
				return
			}
			b := d.of[i]
			d.wg.Go(func() {
				defer close(b.done)
				defer func() { <-sem }()
				if s.stagedUnpack {
					b.err = s.stage(dctx, src, layers[i], b, touch)
				} else {
					b.size, b.err = download(dctx, src, layers[i], b.path, touch)
				}
			})
		}
	})
	return d
}

// download writes the blob to path, verifies its size and digest and
// returns its size.
func download(ctx context.Context, src types.ImageSource, info types.BlobInfo, path string, touch func()) (int64, error) {
	rc, _, err := src.GetBlob(ctx, info, none.NoCache)
	if err != nil {
		return 0, fmt.Errorf("fetching layer %s: %w", info.Digest, err)
	}
	defer func() { _ = rc.Close() }()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("staging layer %s: %w", info.Digest, err)
	}
	verifier := info.Digest.Verifier()
	n, err := io.Copy(io.MultiWriter(f, verifier), touchReader{rc, touch})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("fetching layer %s: %w", info.Digest, err)
	}
	if info.Size >= 0 && n != info.Size {
		return 0, fmt.Errorf("layer %s: %d bytes received, the manifest says %d", info.Digest, n, info.Size)
	}
	if !verifier.Verified() {
		return 0, fmt.Errorf("layer %s: the data received does not match its digest", info.Digest)
	}
	return n, nil
}

// stage unpacks the layer into a staging directory of storage as its blob
// arrives, decompressing it and computing its DiffID in the same pass
// (layerunpack.Differ). The blob's size and digest are checked once all
// of it has arrived; a layer that fails them is removed, never stored.
// Unpacking before the digest is known costs nothing a check first would
// save: the unpack is confined to a directory nothing else sees (and, in
// it, to a chroot), and a registry that lies gets its layer discarded.
func (s *Store) stage(ctx context.Context, src types.ImageSource, info types.BlobInfo, b *blob, touch func()) error {
	rc, _, err := src.GetBlob(ctx, info, none.NoCache)
	if err != nil {
		return fmt.Errorf("fetching layer %s: %w", info.Digest, err)
	}
	defer func() { _ = rc.Close() }()
	var body io.Reader = rc
	if info.Size >= 0 {
		body = io.LimitReader(rc, info.Size+1) // one byte too many tells
	}
	verifier := info.Digest.Verifier()
	blob := &countingReader{r: io.TeeReader(ctxReader{ctx, touchReader{body, touch}}, verifier)}
	out, err := s.store.PrepareStagedLayer(&graphdriver.ApplyDiffWithDifferOpts{},
		&layerunpack.Differ{Blob: blob, Digest: info.Digest})
	// The blob's end (padding after the compressed stream) is digested
	// too; and a blob that failed to unpack may have failed because it
	// is not the one the manifest names, which is the error to report.
	_, rerr := io.Copy(io.Discard, blob)
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case rerr != nil:
		err = fmt.Errorf("fetching layer %s: %w", info.Digest, rerr)
	case info.Size >= 0 && blob.n != info.Size:
		err = fmt.Errorf("layer %s: %d bytes received, the manifest says %d", info.Digest, blob.n, info.Size)
	case !verifier.Verified():
		err = fmt.Errorf("layer %s: the data received does not match its digest", info.Digest)
	case err != nil:
		err = fmt.Errorf("unpacking layer %s: %w", info.Digest, err)
	}
	if err != nil {
		// The driver leaves what was unpacked of a failed layer, and
		// says where once the differ ran. (Cleaning up an empty Target
		// would remove the working directory.)
		if out != nil && out.Target != "" {
			if cerr := s.store.CleanupStagedLayer(out); cerr != nil {
				s.log.Warn("removing a layer that was not stored", "dir", out.Target, "err", cerr)
			}
		}
		return err
	}
	b.staged = out
	return nil
}

// commitLayer stores the unpacked layer of b as id on parent, once its
// DiffID is the one the image config names.
func (s *Store) commitLayer(id, parent string, info types.BlobInfo, diffID digest.Digest, b *blob, touch func()) error {
	if !s.stagedUnpack {
		err := s.putLayer(id, parent, info, diffID, b, touch)
		_ = os.Remove(b.path) // its space is needed for the next layers
		return err
	}
	staged := b.staged
	if staged.UncompressedDigest != diffID {
		return fmt.Errorf("broken image: layer %s unpacks to content with digest %s, the image config says %s", info.Digest, staged.UncompressedDigest, diffID)
	}
	// ApplyStagedLayer on an existing ID would replace that layer's files
	// under its containers; a concurrent pull of another image sharing
	// the layer may have stored it meanwhile. podunit's pulls check and
	// store under one lock.
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if _, err := s.store.Layer(id); err == nil {
		return nil // close gives the staging directory back
	}
	b.staged = nil // storage owns it now, stored or cleaned up
	_, err := s.store.ApplyStagedLayer(storage.ApplyStagedLayerOptions{
		ID:          id,
		ParentLayer: parent,
		DiffOutput:  staged,
		DiffOptions: &graphdriver.ApplyDiffWithDifferOpts{},
	})
	if err != nil {
		if cerr := s.store.CleanupStagedLayer(staged); cerr != nil {
			s.log.Warn("removing an unpacked layer that was not stored", "dir", staged.Target, "err", cerr)
		}
		return fmt.Errorf("storing layer %s: %w", info.Digest, err)
	}
	return nil
}

// putLayer stores layer id from the verified blob b with a driver that
// cannot stage (vfs): storage unpacks it on its parent and computes the
// DiffID while it does, and a layer whose DiffID is not the config's is
// removed again.
func (s *Store) putLayer(id, parent string, info types.BlobInfo, diffID digest.Digest, b *blob, touch func()) error {
	f, err := os.Open(b.path)
	if err != nil {
		return fmt.Errorf("staged layer %s: %w", info.Digest, err)
	}
	defer func() { _ = f.Close() }()
	size := b.size
	layer, _, err := s.store.PutLayer(id, parent, nil, "", false, &storage.LayerOptions{
		OriginalDigest: info.Digest, // verified while downloading
		OriginalSize:   &size,
	}, touchReader{f, touch})
	if errors.Is(err, storage.ErrDuplicateID) {
		return nil // a concurrent pull of another image made it
	}
	if err != nil {
		return fmt.Errorf("storing layer %s: %w", info.Digest, err)
	}
	if layer.UncompressedDigest != diffID {
		if derr := s.store.DeleteLayer(id); derr != nil {
			s.log.Warn("removing a layer that does not match its image config", "layer", id, "err", derr)
		}
		return fmt.Errorf("broken image: layer %s unpacks to content with digest %s, the image config says %s", info.Digest, layer.UncompressedDigest, diffID)
	}
	return nil
}

// commitImage records the image as containers/image's storage destination
// does, or completes the record of an image stored before.
func (s *Store) commitImage(named reference.Named, cfgDigest digest.Digest, cfgBlob []byte, oci *imgspecv1.Image, topLayer string,
	instDigest digest.Digest, instRaw []byte, listDigest digest.Digest, listRaw []byte) (string, error) {
	id := cfgDigest.Encoded()
	big := []storage.ImageBigDataOption{{Key: cfgDigest.String(), Data: cfgBlob, Digest: cfgDigest}}
	if listDigest != "" {
		big = append(big, storage.ImageBigDataOption{Key: manifestKey(listDigest), Data: listRaw, Digest: listDigest})
	}
	big = append(big,
		storage.ImageBigDataOption{Key: manifestKey(instDigest), Data: instRaw, Digest: instDigest},
		storage.ImageBigDataOption{Key: storage.ImageDigestBigDataKey, Data: instRaw, Digest: instDigest})
	opts := &storage.ImageOptions{BigData: big, Metadata: "{}"}
	if oci.Created != nil {
		opts.CreationDate = *oci.Created
	}
	created := true
	_, err := s.store.CreateImage(id, nil, topLayer, "", opts)
	if errors.Is(err, storage.ErrDuplicateID) {
		created = false
		img, err := s.store.Image(id)
		if err != nil {
			return "", storageErr("reading image "+id, err)
		}
		if img.TopLayer != topLayer {
			return "", fmt.Errorf("image %s is stored with other layers: %w", id, errdefs.ErrExists)
		}
		for _, b := range big {
			if err := s.store.SetImageBigData(id, b.Key, b.Data, manifest.Digest); err != nil {
				return "", storageErr("updating image "+id, err)
			}
		}
	} else if err != nil {
		return "", storageErr("creating image "+id, err)
	}
	if err := s.store.AddNames(id, []string{named.String()}); err != nil {
		if created {
			if _, derr := s.store.DeleteImage(id, true); derr != nil {
				s.log.Warn("removing an image that could not be named", "id", id, "err", derr)
			}
		}
		return "", storageErr("naming image "+id, err)
	}
	return id, nil
}

// manifestKey is the big data key containers/image stores a manifest under.
func manifestKey(d digest.Digest) string {
	return storage.ImageDigestManifestBigDataNamePrefix + "-" + d.String()
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ctxReader ends an unpack whose pull was canceled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// touchReader reports every read that moved bytes.
type touchReader struct {
	r     io.Reader
	touch func()
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.touch()
	}
	return n, err
}
