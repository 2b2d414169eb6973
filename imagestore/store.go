// Package imagestore is podunit's image and root-filesystem layer: it pulls
// images with go.podman.io/image, keeps them in a go.podman.io/storage store
// (the same on-disk format podman, skopeo and CRI-O use), and creates, mounts
// and removes the writable layers container root filesystems live in.
//
// The CRI ImageService (package cri) only translates to and from this API.
package imagestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/layerunpack"

	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/signature"
	is "go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	graphdriver "go.podman.io/storage/drivers"
	"go.podman.io/storage/pkg/reexec"
)

// Options configures a Store. The values come from the [image] table of
// package config, which holds their defaults; New rejects a missing one.
type Options struct {
	// Root holds images and layers; pointing it at /var/lib/containers/storage
	// shares the images with podman and skopeo.
	Root string
	// RunRoot holds mount state; it must be on a tmpfs that a reboot clears.
	// With Transient it also holds the records of container filesystems.
	RunRoot string
	// Transient keeps the records of container filesystems (storage
	// containers and their writable layers) in RunRoot, written without
	// fsync, instead of fsynced JSON files under Root: go.podman.io/storage's
	// transient store. Images and their layers stay durable under Root.
	// Container filesystems then last one boot (overlay mounts them
	// "volatile"); what a reboot orphans under Root, CollectOrphanLayers
	// removes.
	Transient bool
	// Driver is the graph driver. Empty means overlay, falling back to vfs
	// (with a warning) where overlay cannot work, e.g. on an overlayfs root.
	Driver string
	// RegistriesConf is a containers-registries.conf(5) v2 file: mirrors,
	// insecure and blocked registries. Its .d directory is read as well.
	RegistriesConf string
	// PolicyPath is a containers-policy.json(5) signature policy.
	PolicyPath string
	// AuthFile is a containers-auth.json(5) file with registry credentials.
	// Empty means none: a daemon must not pick up whatever an admin left in
	// root's ~/.docker or $XDG_RUNTIME_DIR, the containers/image default.
	AuthFile string
	// PullProgressTimeout cancels a pull that receives no data for this long.
	PullProgressTimeout time.Duration
	// MaxParallelPulls bounds how many distinct images download at once.
	MaxParallelPulls int
	// PinnedImages are references (typically the pause image) or globs
	// (pinSet) reported as pinned so the kubelet's image GC keeps them.
	PinnedImages []string
	// Logger receives the store's own events; nil uses slog.Default().
	Logger *slog.Logger
}

// Store is podunit's handle on the image and layer store. It is safe for
// concurrent use.
type Store struct {
	store storage.Store
	opts  Options // its Live fields are as started: read those from live
	log   *slog.Logger
	// live is what Reconfigure may replace while pulls run; each pull
	// loads it once, so one pull never mixes two configurations.
	live    atomic.Pointer[live]
	pulls   *pullGroup
	configs sync.Map // image ID -> *imageConfig; image IDs are content addresses, so entries never go stale

	// removeMu serialises untag/delete decisions so concurrent RemoveImage
	// calls for one image all observe a consistent result.
	removeMu sync.Mutex

	// stagedUnpack: the driver unpacks layers into staging directories
	// (overlay), so a pull unpacks its layers side by side (fetch.go).
	stagedUnpack bool
	// commitMu makes a pull's check that a layer is not stored yet and
	// its storing one step for podunit's concurrent pulls (commitLayer).
	commitMu sync.Mutex

	// mounts are the writable layers this process knows about without
	// asking storage, whose every call queues on store-wide locks behind
	// other containers' creates (rootfs.go, mount).
	mounts mountCache
}

// Reexec must be called first thing in main (and in TestMain) of any binary
// that uses a Store: go.podman.io/storage re-executes the binary for work
// inside a chroot (the vfs driver's layers, diffs read back; the overlay
// driver's layers are applied in process, see layerunpack). It reports
// whether this process was such a child, which has then done its work and
// must exit.
func Reexec() bool { return reexec.Init() }

func (o Options) check() error {
	var missing []string
	for name, v := range map[string]string{"Root": o.Root, "RunRoot": o.RunRoot, "RegistriesConf": o.RegistriesConf, "PolicyPath": o.PolicyPath} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if o.PullProgressTimeout <= 0 {
		missing = append(missing, "PullProgressTimeout")
	}
	if o.MaxParallelPulls <= 0 {
		missing = append(missing, "MaxParallelPulls")
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("image store: options %s are required: %w", strings.Join(missing, ", "), errdefs.ErrInvalid)
	}
	return nil
}

// New opens (creating if needed) the store under o.Root and o.RunRoot.
func New(ctx context.Context, o Options) (*Store, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	for _, dir := range []string{o.Root, o.RunRoot, filepath.Join(o.Root, tmpDirName)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating storage directory: %w", err)
		}
	}
	// Blobs staged there belong to pulls of a process that is gone: the
	// directory is podunit's and the daemon opens its store once.
	if stale, err := os.ReadDir(tmpDir(o.Root)); err == nil {
		for _, e := range stale {
			if err := os.RemoveAll(filepath.Join(tmpDir(o.Root), e.Name())); err != nil {
				o.Logger.WarnContext(ctx, "removing a stale pull staging file", "path", e.Name(), "err", err)
			}
		}
	}
	if err := layerunpack.PruneStaging(o.Root); err != nil {
		o.Logger.WarnContext(ctx, "removing stale unpacked layers", "err", err)
	}
	transient := o.Transient
	if !transient {
		if n := transientRecords(o.RunRoot); n > 0 {
			// Opened as a durable store, those records would be invisible:
			// their containers could be neither listed nor removed, and
			// their layers would be leaked. They go with the next reboot.
			o.Logger.WarnContext(ctx, "storage_transient is off, but the run root holds container filesystems of the transient store: staying transient until the next reboot clears it",
				"runroot", o.RunRoot, "records", n)
			transient = true
		}
	}
	so := storage.StoreOptions{
		GraphRoot:       o.Root,
		RunRoot:         o.RunRoot,
		GraphDriverName: o.Driver,
		TransientStore:  transient,
	}
	if o.Driver == "" {
		// storage tries these in order and skips drivers that report the
		// backing filesystem unusable; it also keeps whichever driver an
		// existing root was created with.
		so.GraphDriverPriority = []string{"overlay", "vfs"}
	}
	// Layers are applied in this process, not by a re-executed podunit
	// per layer (layerunpack).
	layerunpack.Install()
	st, err := storage.GetStore(so)
	if err != nil {
		return nil, fmt.Errorf("opening storage at %s (driver %q): %w", o.Root, o.Driver, err)
	}
	driver := st.GraphDriverName()
	if o.Driver == "" && driver != "overlay" {
		o.Logger.WarnContext(ctx, "overlay graph driver unusable, using a slower fallback; every container copies its image",
			"driver", driver, "root", o.Root)
	}
	o.Logger.InfoContext(ctx, "image store ready", "root", o.Root, "runroot", o.RunRoot, "driver", driver, "transient", transient)

	l, err := newLive(o.Live())
	if err != nil {
		_, _ = st.Shutdown(false)
		return nil, err
	}
	s := &Store{
		store: st,
		opts:  o,
		log:   o.Logger,
		pulls: newPullGroup(o.MaxParallelPulls),
	}
	if d, err := st.GraphDriver(); err == nil {
		_, s.stagedUnpack = d.(graphdriver.DriverWithDiffer)
	}
	s.live.Store(l)
	// Parsing registries.conf now puts it in containers/image's cache, which
	// is what a reload that finds the file broken keeps using; it also tells
	// the operator at start rather than at the first pull.
	if _, err := sysregistriesv2.TryUpdatingCache(s.systemContext()); err != nil {
		o.Logger.WarnContext(ctx, "registries configuration unusable: pulls will fail until it is fixed", "err", err)
	}
	return s, nil
}

// Live are the options a reload may change on a running Store.
type Live struct {
	RegistriesConf      string
	PolicyPath          string
	AuthFile            string
	PullProgressTimeout time.Duration
	PinnedImages        []string
}

// Live returns the reloadable part of o.
func (o Options) Live() Live {
	return Live{
		RegistriesConf: o.RegistriesConf, PolicyPath: o.PolicyPath, AuthFile: o.AuthFile,
		PullProgressTimeout: o.PullProgressTimeout, PinnedImages: o.PinnedImages,
	}
}

// live is a checked Live with the pinned references and globs parsed.
type live struct {
	Live
	pinned pinSet
}

func newLive(l Live) (*live, error) {
	if l.RegistriesConf == "" || l.PolicyPath == "" || l.PullProgressTimeout <= 0 {
		return nil, fmt.Errorf("image store: registries conf, policy path and pull progress timeout are required: %w", errdefs.ErrInvalid)
	}
	pinned, err := newPinSet(l.PinnedImages)
	if err != nil {
		return nil, err
	}
	out := &live{Live: l, pinned: pinned}
	out.PinnedImages = slices.Clone(l.PinnedImages)
	return out, nil
}

func (s *Store) cur() *live { return s.live.Load() }

// Reconfigure switches the store to l once it has checked it: the pinned
// references and globs parse, the signature policy parses and registries.conf (with
// its .d directory) parses. Otherwise it returns why and keeps everything
// as it was, including containers/image's cached registries configuration,
// which it otherwise re-reads: that cache is never refreshed by itself.
// Pulls already running finish with the configuration they started with.
func (s *Store) Reconfigure(ctx context.Context, l Live) error {
	next, err := newLive(l)
	if err != nil {
		return err
	}
	if _, err := signature.NewPolicyFromFile(next.PolicyPath); err != nil {
		return fmt.Errorf("signature policy %s: %w: %w", next.PolicyPath, errdefs.ErrInvalid, err)
	}
	// Last, because on success it replaces the cached configuration for
	// these paths at once, and nothing after it may fail.
	if _, err := sysregistriesv2.TryUpdatingCache(systemContext(s.opts, next)); err != nil {
		return fmt.Errorf("registries configuration %s: %w: %w", next.RegistriesConf, errdefs.ErrInvalid, err)
	}
	s.live.Store(next)
	s.log.InfoContext(ctx, "image configuration reloaded", "registries_conf", next.RegistriesConf,
		"policy", next.PolicyPath, "auth_file", next.AuthFile, "pinned", next.PinnedImages)
	return nil
}

// Close releases the store. Mounted container filesystems stay mounted, so
// that running containers are unaffected and a restarted podunit finds them.
func (s *Store) Close() error {
	s.pulls.cancelAll()
	_, err := s.store.Shutdown(false)
	if errors.Is(err, storage.ErrLayerUsedByContainer) {
		// Mounted layers are expected across restarts (see above).
		return nil
	}
	return err
}

// Driver names the graph driver in use ("overlay" or "vfs").
func (s *Store) Driver() string { return s.store.GraphDriverName() }

// systemContext is the containers/image configuration for one operation.
func (s *Store) systemContext() *types.SystemContext {
	return systemContext(s.opts, s.cur())
}

func systemContext(o Options, l *live) *types.SystemContext {
	return &types.SystemContext{
		SystemRegistriesConfPath:    l.RegistriesConf,
		SystemRegistriesConfDirPath: l.RegistriesConf + ".d",
		SignaturePolicyPath:         l.PolicyPath,
		AuthFilePath:                authFile(o.RunRoot, l.AuthFile),
		DockerRegistryUserAgent:     "podunit",
		// Large blobs are staged under the store itself rather than in
		// /var/tmp, which may be a different (smaller) filesystem.
		BigFilesTemporaryDir: tmpDir(o.Root),
	}
}

// authFile is Options.AuthFile, or when unset a path that never exists:
// naming a file is the only way to switch off containers/image's search of
// the home directory, and a missing file just means no credentials.
func authFile(runRoot, configured string) string {
	if configured != "" {
		return configured
	}
	return filepath.Join(runRoot, "podunit-no-auth-file", "auth.json")
}

// tmpDirName is podunit's staging directory inside Root.
const tmpDirName = "podunit-tmp"

func tmpDir(root string) string { return filepath.Join(root, tmpDirName) }

// imageRef is a containers/image reference to an image already in the store.
func (s *Store) imageRef(id string) (types.ImageReference, error) {
	return is.Transport.NewStoreReference(s.store, nil, id)
}
