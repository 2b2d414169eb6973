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
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/podunit/podunit/errdefs"

	is "go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	"go.podman.io/storage/pkg/reexec"
)

// Options configures a Store. The values come from the [image] table of
// package config, which holds their defaults; New rejects a missing one.
type Options struct {
	// Root holds images and layers; pointing it at /var/lib/containers/storage
	// shares the images with podman and skopeo.
	Root string
	// RunRoot holds mount state; it must be on a tmpfs that a reboot clears.
	RunRoot string
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
	store   storage.Store
	opts    Options
	log     *slog.Logger
	pinned  pinSet
	pulls   *pullGroup
	configs sync.Map // image ID -> *imageConfig; image IDs are content addresses, so entries never go stale

	// removeMu serialises untag/delete decisions so concurrent RemoveImage
	// calls for one image all observe a consistent result.
	removeMu sync.Mutex
}

// Reexec must be called first thing in main (and in TestMain) of any binary
// that uses a Store: go.podman.io/storage re-executes the binary to apply
// layers inside a chroot. It reports whether this process was such a child,
// which has then done its work and must exit.
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
	so := storage.StoreOptions{
		GraphRoot:       o.Root,
		RunRoot:         o.RunRoot,
		GraphDriverName: o.Driver,
	}
	if o.Driver == "" {
		// storage tries these in order and skips drivers that report the
		// backing filesystem unusable; it also keeps whichever driver an
		// existing root was created with.
		so.GraphDriverPriority = []string{"overlay", "vfs"}
	}
	st, err := storage.GetStore(so)
	if err != nil {
		return nil, fmt.Errorf("opening storage at %s (driver %q): %w", o.Root, o.Driver, err)
	}
	driver := st.GraphDriverName()
	if o.Driver == "" && driver != "overlay" {
		o.Logger.WarnContext(ctx, "overlay graph driver unusable, using a slower fallback; every container copies its image",
			"driver", driver, "root", o.Root)
	}
	o.Logger.InfoContext(ctx, "image store ready", "root", o.Root, "runroot", o.RunRoot, "driver", driver)

	pinned, err := newPinSet(o.PinnedImages)
	if err != nil {
		_, _ = st.Shutdown(false)
		return nil, err
	}
	return &Store{
		store:  st,
		opts:   o,
		log:    o.Logger,
		pinned: pinned,
		pulls:  newPullGroup(o.MaxParallelPulls),
	}, nil
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
	return &types.SystemContext{
		SystemRegistriesConfPath:    s.opts.RegistriesConf,
		SystemRegistriesConfDirPath: s.opts.RegistriesConf + ".d",
		SignaturePolicyPath:         s.opts.PolicyPath,
		AuthFilePath:                s.authFile(),
		DockerRegistryUserAgent:     "podunit",
		// Large blobs are staged under the store itself rather than in
		// /var/tmp, which may be a different (smaller) filesystem.
		BigFilesTemporaryDir: s.tmpDir(),
	}
}

// authFile is Options.AuthFile, or when unset a path that never exists:
// naming a file is the only way to switch off containers/image's search of
// the home directory, and a missing file just means no credentials.
func (s *Store) authFile() string {
	if s.opts.AuthFile != "" {
		return s.opts.AuthFile
	}
	return filepath.Join(s.opts.RunRoot, "podunit-no-auth-file", "auth.json")
}

// tmpDirName is podunit's staging directory inside Root.
const tmpDirName = "podunit-tmp"

func (s *Store) tmpDir() string { return filepath.Join(s.opts.Root, tmpDirName) }

// imageRef is a containers/image reference to an image already in the store.
func (s *Store) imageRef(id string) (types.ImageReference, error) {
	return is.Transport.NewStoreReference(s.store, nil, id)
}
