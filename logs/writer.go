package logs

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/statefile"
)

// fileState is what survives a podunit restart for one container. The
// invariant, kept by commit: the file identified by Dev/Ino holds, up to
// Offset, exactly the container's lines of every entry at or before Pos, and
// nothing else. Bytes past Offset were written but not committed; they are
// cut off and written again from the journal after a restart.
type fileState struct {
	ContainerID string `json:"container_id"`
	LogPath     string `json:"log_path"`
	UID         int    `json:"uid"`
	GID         int    `json:"gid"`
	// Cursor is the journal cursor of Pos: where the follower resumes.
	Cursor string   `json:"cursor,omitempty"`
	Pos    Position `json:"pos"`
	Dev    uint64   `json:"dev,omitempty"`
	Ino    uint64   `json:"ino,omitempty"`
	Offset int64    `json:"offset"`
}

// writeOutSize is how much formatted output a writer buffers before handing
// it to the file (visible to `kubectl logs -f`, not yet durable).
const writeOutSize = 256 << 10

// writer turns one container's entries into its CRI log file. It is owned by
// the Manager's loop goroutine and never locked.
type writer struct {
	st        fileState // as last persisted
	cursor    string    // last entry handled (may be ahead of st)
	pos       Position
	f         *os.File
	offset    int64 // bytes in the file, written or buffered
	buf       []byte
	dirty     bool // entries handled since the last commit
	persisted time.Time
	statePath string
	log       *slog.Logger
	broken    error // the file cannot be written; entries are dropped
}

func (w *writer) id() string { return w.st.ContainerID }

// open opens the log file for appending, repairing it after a crash: bytes
// past the committed offset are cut off (the journal still has them), and a
// file that is not the one the state names (renamed away while podunit was
// down, or never created) is replaced by a new one at LogPath.
func (w *writer) open() error {
	if w.f != nil {
		return nil
	}
	var st syscall.Stat_t
	err := syscall.Stat(w.st.LogPath, &st)
	switch {
	case err == nil && w.st.Ino != 0 && st.Dev == w.st.Dev && st.Ino == w.st.Ino:
		if st.Size > w.st.Offset {
			if err := os.Truncate(w.st.LogPath, w.st.Offset); err != nil {
				return fmt.Errorf("cut uncommitted log tail of %s: %w", w.st.LogPath, err)
			}
		} else if st.Size < w.st.Offset {
			w.log.Warn("container log file shorter than recorded; appending", "path", w.st.LogPath, "size", st.Size, "recorded", w.st.Offset)
			w.st.Offset = st.Size
		}
		f, err := os.OpenFile(w.st.LogPath, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("open container log: %w", err)
		}
		w.f, w.offset = f, w.st.Offset
		return nil
	case err == nil && w.st.Ino != 0:
		// another file at the path: the one we wrote to was rotated
		// away; lines written to it but not committed will also appear
		// in the new file
		w.log.Warn("container log file replaced while podunit was down; lines near the switch may repeat", "path", w.st.LogPath)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("stat container log: %w", err)
	}
	return w.create()
}

// create opens (creating if needed) the file at LogPath as the writer's new
// file and makes the switch durable before anything is written to it.
func (w *writer) create() error {
	dir := filepath.Dir(w.st.LogPath)
	if err := mkdirOwned(dir, w.st.UID, w.st.GID); err != nil {
		return err
	}
	f, err := os.OpenFile(w.st.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("create container log: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return fmt.Errorf("stat container log: %w", err)
	}
	if st.Size == 0 && (w.st.UID >= 0 || w.st.GID >= 0) {
		if err := f.Chown(w.st.UID, w.st.GID); err != nil {
			f.Close()
			return fmt.Errorf("chown container log: %w", err)
		}
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return err
	}
	w.f, w.offset = f, st.Size
	w.st.Dev, w.st.Ino, w.st.Offset = st.Dev, st.Ino, st.Size
	return w.persist()
}

// mkdirOwned creates dir and missing parents (containerd does the same for
// log paths with a sub-directory), giving new ones the log's owner.
func mkdirOwned(dir string, uid, gid int) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := mkdirOwned(filepath.Dir(dir), uid, gid); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create log directory: %w", err)
	}
	if uid >= 0 || gid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			return fmt.Errorf("chown log directory: %w", err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open log directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync log directory: %w", err)
	}
	return nil
}

// add appends the entry's lines unless the file already has them.
func (w *writer) add(e *Entry) {
	if !e.Pos.After(w.pos) {
		return
	}
	w.pos, w.cursor, w.dirty = e.Pos, e.Cursor, true
	if w.broken != nil {
		return
	}
	n := len(w.buf)
	w.buf = AppendCRI(w.buf, e.Time, e.Stream, e.Message, e.Complete())
	w.offset += int64(len(w.buf) - n)
	if len(w.buf) >= writeOutSize {
		w.writeOut()
	}
}

// writeOut hands buffered lines to the file. A failing file breaks the
// writer: its lines stay in the journal, the CRI log misses them.
func (w *writer) writeOut() {
	if len(w.buf) == 0 || w.broken != nil {
		return
	}
	if _, err := w.f.Write(w.buf); err != nil {
		w.fail(fmt.Errorf("write container log %s: %w", w.st.LogPath, err))
		return
	}
	w.buf = w.buf[:0]
	if cap(w.buf) > 4*writeOutSize {
		w.buf = nil
	}
}

func (w *writer) fail(err error) {
	w.log.Error("container log writer stopped; lines stay in the journal only until Reopen", "path", w.st.LogPath, "error", err)
	w.broken = err
	w.buf = nil
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}

// commit makes everything handled so far durable: lines first (fsync), then
// the position and offset. A crash in between leaves lines past the recorded
// offset, which open cuts off: never a line twice, never one lost.
func (w *writer) commit() error {
	if !w.dirty {
		return nil
	}
	w.writeOut()
	if w.broken == nil {
		if err := w.f.Sync(); err != nil {
			w.fail(fmt.Errorf("sync container log %s: %w", w.st.LogPath, err))
		}
	}
	if w.broken == nil {
		w.st.Offset = w.offset
	}
	w.st.Cursor, w.st.Pos = w.cursor, w.pos
	w.dirty = false
	return w.persist()
}

// advance moves an idle writer's position up to the follower's: every
// entry up to there has been handled, none was this container's. Saved
// now and then, it keeps a restart from re-reading a long quiet stretch.
func (w *writer) advance(cursor string, pos Position, now time.Time) error {
	if w.dirty || !pos.After(w.pos) {
		return nil
	}
	w.pos, w.cursor = pos, cursor
	if now.Sub(w.persisted) < idlePersistInterval {
		return nil
	}
	w.st.Cursor, w.st.Pos = cursor, pos
	return w.persist()
}

const idlePersistInterval = 30 * time.Second

func (w *writer) persist() error {
	if err := statefile.Write(w.statePath, &w.st); err != nil {
		return fmt.Errorf("container %s log state: %w", w.id(), err)
	}
	w.persisted = time.Now()
	return nil
}

// reopen switches to a new file at LogPath after the kubelet renamed the
// current one (log rotation).
func (w *writer) reopen() error {
	if err := w.commit(); err != nil {
		return err
	}
	w.close()
	w.broken = nil
	if err := w.create(); err != nil {
		w.broken = err
		return err
	}
	return nil
}

func (w *writer) close() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}

// loadStates reads every container's persisted log state.
func loadStates(dir string) ([]fileState, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("list log states: %w", err)
	}
	var out []fileState
	for _, n := range names {
		var st fileState
		if err := statefile.Read(n, &st); err != nil {
			return nil, err
		}
		if st.ContainerID == "" || filepath.Base(n) != st.ContainerID+".json" {
			return nil, fmt.Errorf("log state %s names container %q: %w", n, st.ContainerID, errdefs.ErrInvalid)
		}
		out = append(out, st)
	}
	return out, nil
}
