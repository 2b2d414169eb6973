package layerunpack

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	tsasm "github.com/vbatts/tar-split/tar/asm"
	tsstorage "github.com/vbatts/tar-split/tar/storage"
	graphdriver "go.podman.io/storage/drivers"
	"go.podman.io/storage/pkg/archive"
	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: chroot")
	}
}

// entry is one member of a test layer.
type entry struct {
	name, link, body string
	typ              byte
}

func layer(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	// Zero padding after the end of the archive, as some registries'
	// layers have; Untar must consume it (storage digests all of it).
	b.Write(make([]byte, 4096))
	return &b
}

// The chroot is the thread's alone: while many unpacks run, the rest of
// the process still sees the host's root, and each fn sees its own.
func TestInRootConfinesOnlyItsThread(t *testing.T) {
	needRoot(t)
	host := t.TempDir()
	marker := filepath.Join(host, "host-only")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		root := t.TempDir()
		name := "root-" + strconv.Itoa(i)
		if err := os.WriteFile(filepath.Join(root, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			errs <- inRoot(root, func() error {
				if wd, err := os.Getwd(); err != nil || wd != "/" {
					return errors.New("working directory in the chroot: " + wd)
				}
				if _, err := os.Stat("/" + name); err != nil {
					return err
				}
				if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
					return errors.New("the host's file is visible in the chroot")
				}
				return nil
			})
		})
		wg.Go(func() {
			if _, err := os.Stat(marker); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if root, err := os.Readlink("/proc/self/root"); err != nil || root != "/" {
		t.Fatalf("process root after the unpacks: %q, %v", root, err)
	}
}

// A layer's symlinks resolve inside the layer and its paths cannot climb
// out of it; the stream is read to its end.
func TestUntarKeepsTheLayerInside(t *testing.T) {
	needRoot(t)
	outside := t.TempDir()
	dest := filepath.Join(t.TempDir(), "diff")
	src := layer(t,
		entry{name: "etc/", typ: tar.TypeDir},
		entry{name: "etc/hostname", body: "layer\n", typ: tar.TypeReg},
		entry{name: "abs", link: outside, typ: tar.TypeSymlink},
		entry{name: "abs/escaped", body: "x", typ: tar.TypeReg},
		entry{name: "rel", link: "../../../../../../..", typ: tar.TypeSymlink},
		entry{name: "rel/" + outside[1:] + "/escaped-rel", body: "x", typ: tar.TypeReg},
		entry{name: "hard", link: "etc/hostname", typ: tar.TypeLink},
	)
	if err := Untar(src, dest, &archive.TarOptions{}); err != nil {
		t.Fatal(err)
	}
	if src.Len() != 0 {
		t.Errorf("%d bytes of the stream left unread", src.Len())
	}
	if got, err := os.ReadFile(filepath.Join(dest, "hard")); err != nil || string(got) != "layer\n" {
		t.Errorf("hard link: %q, %v", got, err)
	}
	if link, err := os.Readlink(filepath.Join(dest, "abs")); err != nil || link != outside {
		t.Errorf("symlink kept as written: %q, %v", link, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the layer wrote outside its directory: %v", ents)
	}
	// Both escapes landed in the layer, where their symlinks point from
	// inside the chroot.
	for _, p := range []string{filepath.Join(outside, "escaped"), filepath.Join(outside, "escaped-rel")} {
		if _, err := os.Stat(filepath.Join(dest, p)); err != nil {
			t.Errorf("%s not inside the layer: %v", p, err)
		}
	}

	// A name above the root is the root, as in chrootarchive's child; a
	// hard link cannot name a file outside.
	parent := t.TempDir()
	d := filepath.Join(parent, "diff")
	if err := Untar(layer(t, entry{name: "../up", body: "x", typ: tar.TypeReg}), d, &archive.TarOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "up")); err != nil {
		t.Errorf("../up not at the layer's root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "up")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("../up written above the layer: %v", err)
	}
	host, err := os.CreateTemp("", "layerunpack-target")
	if err != nil {
		t.Fatal(err)
	}
	host.Close()
	defer os.Remove(host.Name())
	link := entry{name: "h2", link: "../../../../../.." + host.Name(), typ: tar.TypeLink}
	if err := Untar(layer(t, link), filepath.Join(t.TempDir(), "diff"), &archive.TarOptions{}); err == nil {
		t.Errorf("a hard link to %s outside the layer was made", host.Name())
	}
}

func TestUntarEmptyArchive(t *testing.T) {
	if err := Untar(nil, t.TempDir(), nil); err == nil {
		t.Fatal("nil archive unpacked")
	}
}

func gzipped(t *testing.T, b []byte) *bytes.Buffer {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return &z
}

// The differ hands storage what PutLayer would have computed: the DiffID
// and size of the whole uncompressed stream, the files' owners, and a
// tar-split from which the exact tar is rebuilt; the root's mode only
// when the layer sets it.
func TestDifferStagesWhatPutLayerRecords(t *testing.T) {
	needRoot(t)
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o711},
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 7, Gid: 8},
		{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3, Uid: 1000, Gid: 100},
		{Name: "etc/.wh.gone", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 4242, Gid: 4242},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := io.WriteString(tw, "id\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw.Write(make([]byte, 1024)) // padding past the end: part of the DiffID
	want := raw.Bytes()

	staging := t.TempDir()
	dest := filepath.Join(staging, "dir")
	if err := os.Mkdir(dest, 0o555); err != nil {
		t.Fatal(err)
	}
	d := &Differ{Blob: gzipped(t, want), Digest: "sha256:blob"}
	out, err := d.ApplyDiff(dest, &archive.TarOptions{WhiteoutFormat: archive.OverlayWhiteoutFormat},
		&graphdriver.DifferOptions{Format: graphdriver.DifferOutputFormatDir, StagingDirectory: staging})
	if err != nil {
		t.Fatal(err)
	}
	defer out.TarSplit.Close()
	if out.UncompressedDigest != digest.FromBytes(want) || out.Size != int64(len(want)) {
		t.Errorf("DiffID %s size %d, want %s %d", out.UncompressedDigest, out.Size, digest.FromBytes(want), len(want))
	}
	if out.CompressedDigest != "" {
		t.Errorf("compressed digest %s recorded without its size", out.CompressedDigest)
	}
	// Whiteouts' owners are not the layer's (storage skips them too).
	if !slices.Equal(out.UIDs, []uint32{0, 7, 1000}) || !slices.Equal(out.GIDs, []uint32{0, 8, 100}) {
		t.Errorf("owners %v %v", out.UIDs, out.GIDs)
	}
	if out.RootDirMode == nil || out.RootDirMode.Perm() != 0o711 {
		t.Errorf("root mode %v, want 0711 from the layer", out.RootDirMode)
	}
	if got, err := os.ReadFile(filepath.Join(dest, "etc/os-release")); err != nil || string(got) != "id\n" {
		t.Errorf("unpacked file: %q, %v", got, err)
	}
	var rebuilt bytes.Buffer
	rc := tsasm.NewOutputTarStream(tsstorage.NewPathFileGetter(dest), tsstorage.NewJSONUnpacker(out.TarSplit))
	if _, err := io.Copy(&rebuilt, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if !bytes.Equal(rebuilt.Bytes(), want) {
		t.Errorf("the tar rebuilt from the tar-split differs from the layer (%d against %d bytes)", rebuilt.Len(), len(want))
	}

	// No root entry: storage gives the directory its parent's mode.
	dest2 := filepath.Join(staging, "dir2")
	d2 := &Differ{Blob: layer(t, entry{name: "f", body: "x", typ: tar.TypeReg}), Digest: "sha256:blob2"}
	out2, err := d2.ApplyDiff(dest2, &archive.TarOptions{}, &graphdriver.DifferOptions{StagingDirectory: staging})
	if err != nil {
		t.Fatal(err)
	}
	out2.TarSplit.Close()
	if out2.RootDirMode != nil {
		t.Errorf("root mode %v set by a layer without a root entry", out2.RootDirMode)
	}
	if _, err := d2.ApplyDiff(filepath.Join(staging, "flat"), &archive.TarOptions{},
		&graphdriver.DifferOptions{Format: graphdriver.DifferOutputFormatFlat, StagingDirectory: staging}); err == nil {
		t.Error("composefs's flat layout accepted")
	}
	if ents, _ := os.ReadDir(staging); len(ents) != 2 {
		t.Errorf("staging directory holds %d entries, want the two layers only (tar-splits unlinked)", len(ents))
	}
}

const holdLockEnv = "LAYERUNPACK_HOLD_LOCK"

// TestHelperHoldLock is not a test: run as a child by TestPruneStaging, it
// holds the staging lock named in its environment until stdin closes.
func TestHelperHoldLock(t *testing.T) {
	path := os.Getenv(holdLockEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("locked\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// Staging directories of a dead process go, locked or not; one another
// process holds stays.
func TestPruneStaging(t *testing.T) {
	root := t.TempDir()
	staging := filepath.Join(root, "overlay", "staging")
	for _, d := range []string{"dead-locked", "dead-unlocked", "held"} {
		if err := os.MkdirAll(filepath.Join(staging, d, "dir", "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if d != "dead-unlocked" {
			if err := os.WriteFile(filepath.Join(staging, d, "staging.lock"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	cmd.Env = append(os.Environ(), holdLockEnv+"="+filepath.Join(staging, "held", "staging.lock"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line := make([]byte, 7)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "locked\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}

	if err := PruneStaging(root); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(staging)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "held" {
		t.Errorf("left after pruning: %v, want only the held directory", ents)
	}
	if err := PruneStaging(t.TempDir()); err != nil {
		t.Errorf("a root without staging: %v", err)
	}
}
