package logrelay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/podunit/podunit/logs"
)

// The relay writes each container's CRI log file itself (the kubelet reads
// it for `kubectl logs`): both streams of a container append to one file,
// line by line, in the format logs.AppendCRI makes.
//
// Exactly once across a relay SIGKILL: the pipes stay in systemd's fd store,
// so what the relay has not taken from them is still there. It takes bytes
// with splice(2) into a spool file per stream (tmpfs: a process kill does
// not lose it, no fsync is paid), so nothing it took lives only in its
// memory. Before each write to the log file the stream saves a record
// holding the bytes about to be written, the file offset they go to, and
// how far into the spool they reach. A restarted relay finishes a write
// the kill interrupted (the file is shorter than offset+length) and goes
// on from the recorded spool offset: a line straddling two reads (the
// spool's tail) is neither cut nor repeated. The log file itself is in the
// fd store too: a kill between the kubelet's rename and ReopenContainerLog
// still finds the file the record speaks of.

// logFile is a container's CRI log file, shared by its two streams.
type logFile struct {
	mu       sync.Mutex
	path     string
	uid, gid int
	f        *os.File
	dev, ino uint64
	size     int64
}

// openLogFile opens (creating if needed) path for appending. A new file
// and new directories get uid/gid; -1 takes the owner of the nearest
// existing directory above path (the pod's log directory).
func openLogFile(path string, uid, gid int) (*os.File, error) {
	dir := filepath.Dir(path)
	if uid < 0 || gid < 0 {
		if st, ok := nearestDirOwner(dir); ok {
			if uid < 0 {
				uid = int(st.Uid)
			}
			if gid < 0 {
				gid = int(st.Gid)
			}
		}
	}
	if err := mkdirOwned(dir, uid, gid); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open container log: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.Size() == 0 && (uid >= 0 || gid >= 0) {
		if err := f.Chown(uid, gid); err != nil {
			f.Close()
			return nil, fmt.Errorf("chown container log: %w", err)
		}
	}
	return f, nil
}

func nearestDirOwner(dir string) (*syscall.Stat_t, bool) {
	for {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err == nil {
			return &st, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, false
		}
		dir = parent
	}
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

// use makes f the file written to; lf.mu is held or lf is not shared yet.
func (lf *logFile) use(f *os.File) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat container log: %w", err)
	}
	if lf.f != nil {
		lf.f.Close()
	}
	lf.f, lf.dev, lf.ino, lf.size = f, st.Dev, st.Ino, st.Size
	return nil
}

// write appends b as one write; rec, saved first, lets a restarted relay
// finish it. A failed write is cut back so the file ends on a line
// boundary; its lines are lost for the CRI file (the container is not
// blocked: a full /var/log/pods must not stop the pod). A record that
// cannot be saved (state dir full) does not hold the lines back either:
// only their safety across a relay kill is lost, and the error says so.
func (lf *logFile) write(b []byte, rec *recorder, gen uint64, consumed int64) error {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	var recErr error
	if rec != nil {
		recErr = rec.save(lf.dev, lf.ino, lf.size, b, gen, consumed)
	}
	if lf.f == nil || len(b) == 0 {
		return recErr
	}
	n, err := lf.f.Write(b)
	if err != nil {
		if n > 0 {
			_ = lf.f.Truncate(lf.size)
		}
		return errors.Join(fmt.Errorf("write %s: %w", lf.path, err), recErr)
	}
	lf.size += int64(n)
	return recErr
}

// criStream turns one stream's bytes into CRI lines.
type criStream struct {
	stream  logs.Stream
	lf      *logFile
	rec     *recorder
	sp      *spool // nil: bytes come straight from the pipe (tests)
	pending []byte // the unterminated tail of what was read so far
	buf     []byte
}

// take formats chunk (after the pending tail) and writes the complete
// lines; at eof an unterminated last line is written as a partial line,
// as containerd does. Lines longer than logs.MaxLineSize go out as P
// pieces at once, so at most that much stays pending.
func (c *criStream) take(chunk []byte, eof bool, now time.Time) error {
	data := chunk
	if len(c.pending) > 0 {
		c.pending = append(c.pending, chunk...)
		data = c.pending
	}
	b := c.buf[:0]
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i]
		// containerd drops the CR of a CRLF line end, and so does the
		// kubelet's view of other runtimes' logs.
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		b = logs.AppendCRI(b, now, c.stream, line, true)
		data = data[i+1:]
	}
	for len(data) > logs.MaxLineSize {
		b = logs.AppendCRI(b, now, c.stream, data[:logs.MaxLineSize], false)
		data = data[logs.MaxLineSize:]
	}
	if eof && len(data) > 0 {
		b = logs.AppendCRI(b, now, c.stream, data, false)
		data = nil
	}
	taken := len(chunk) - len(data)
	if len(c.pending) > 0 {
		taken = len(c.pending) - len(data)
	}
	// data may alias pending: move it to the front.
	c.pending = append(c.pending[:0], data...)
	c.buf = b
	if len(b) == 0 && len(chunk) == 0 {
		return nil
	}
	var gen uint64
	var consumed int64
	if c.sp != nil {
		c.sp.consumed += int64(taken)
		gen, consumed = c.sp.gen, c.sp.consumed
	}
	return c.lf.write(b, c.rec, gen, consumed)
}

// recorder keeps a stream's write-ahead record in two alternating slots
// (files), so a kill while one is written leaves the other intact.
type recorder struct {
	slots [2]*os.File
	seq   uint64
	hdr   []byte
}

const (
	recMagic   = "PUL2"
	recHdrSize = 4 + 8 + 8 + 8 + 8 + 8 + 8 + 4 + 4
)

// record is what a stream saved before its last write.
type record struct {
	seq      uint64
	dev, ino uint64
	off      int64
	data     []byte // the bytes written at off
	gen      uint64 // the spool generation in use
	consumed int64  // how much of that spool data covers
}

func recordPaths(base string) [2]string { return [2]string{base + ".0", base + ".1"} }

// openRecorder opens (creating) the slot files at base.0 and base.1 and
// returns the newest valid record in them, if any.
func openRecorder(base string) (*recorder, *record, error) {
	r := &recorder{}
	var newest *record
	for i, p := range recordPaths(base) {
		if b, err := os.ReadFile(p); err == nil {
			if rec, ok := parseRecord(b); ok && (newest == nil || rec.seq > newest.seq) {
				newest = rec
			}
		}
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			r.close()
			return nil, nil, fmt.Errorf("log relay record: %w", err)
		}
		r.slots[i] = f
	}
	if newest != nil {
		r.seq = newest.seq
	}
	return r, newest, nil
}

func (r *recorder) save(dev, ino uint64, off int64, data []byte, gen uint64, consumed int64) error {
	r.seq++
	h := r.hdr[:0]
	h = append(h, recMagic...)
	h = binary.LittleEndian.AppendUint64(h, r.seq)
	h = binary.LittleEndian.AppendUint64(h, dev)
	h = binary.LittleEndian.AppendUint64(h, ino)
	h = binary.LittleEndian.AppendUint64(h, uint64(off))
	h = binary.LittleEndian.AppendUint64(h, gen)
	h = binary.LittleEndian.AppendUint64(h, uint64(consumed))
	h = binary.LittleEndian.AppendUint32(h, uint32(len(data)))
	crc := crc32.Update(crc32.ChecksumIEEE(h), crc32.IEEETable, data)
	h = binary.LittleEndian.AppendUint32(h, crc)
	h = append(h, data...)
	r.hdr = h[:0]
	if _, err := r.slots[r.seq%2].WriteAt(h, 0); err != nil {
		return fmt.Errorf("log relay record: %w", err)
	}
	return nil
}

func parseRecord(b []byte) (*record, bool) {
	if len(b) < recHdrSize || string(b[:4]) != recMagic {
		return nil, false
	}
	le := binary.LittleEndian
	rec := &record{seq: le.Uint64(b[4:]), dev: le.Uint64(b[12:]), ino: le.Uint64(b[20:]), off: int64(le.Uint64(b[28:])),
		gen: le.Uint64(b[36:]), consumed: int64(le.Uint64(b[44:]))}
	nd := int(le.Uint32(b[52:]))
	if nd < 0 || len(b) < recHdrSize+nd {
		return nil, false
	}
	body := b[recHdrSize : recHdrSize+nd]
	crc := crc32.Update(crc32.ChecksumIEEE(b[:recHdrSize-4]), crc32.IEEETable, body)
	if crc != le.Uint32(b[recHdrSize-4:]) {
		return nil, false
	}
	rec.data = append([]byte(nil), body...)
	return rec, true
}

func (r *recorder) close() {
	for _, f := range r.slots {
		if f != nil {
			f.Close()
		}
	}
}

// removeRecords deletes a finished stream's record files.
func removeRecords(base string) {
	for _, p := range recordPaths(base) {
		_ = os.Remove(p)
	}
}

// repair finishes the one write a kill may have interrupted: of the
// records that speak of the current file, only the newest write can be
// incomplete (writes to a file are serialised), and only if the file ends
// before its end. Records of another file (rotated since) were complete,
// since a reopen waits for the write in progress.
func (lf *logFile) repair(recs []*record) error {
	if lf.f == nil {
		return nil
	}
	size0 := lf.size
	for _, rec := range recs {
		if rec == nil || rec.dev != lf.dev || rec.ino != lf.ino || rec.off+int64(len(rec.data)) <= size0 {
			continue
		}
		if rec.off > size0 {
			// Not ours to explain (the file was cut by someone else):
			// append what the record holds rather than leave a gap.
			rec.off = size0
		}
		if err := lf.f.Truncate(rec.off); err != nil {
			return fmt.Errorf("repair %s: %w", lf.path, err)
		}
		n, err := lf.f.Write(rec.data)
		if err != nil {
			return fmt.Errorf("repair %s: %w", lf.path, err)
		}
		lf.size = rec.off + int64(n)
	}
	return nil
}

// spool holds a stream's bytes taken from the pipe whose lines are not all
// in the log file yet: a file in the relay's state dir that splice(2)
// appends to. Once it grows past spoolMax the next generation takes over,
// carrying the unterminated tail.
type spool struct {
	base     string
	f        *os.File
	gen      uint64
	end      int64 // bytes in the spool
	consumed int64 // bytes of it whose lines are in the log file
}

const spoolMax = 1 << 20

func spoolPath(base string, gen uint64) string { return fmt.Sprintf("%s.%d", base, gen) }

// openSpool opens generation gen at base (creating it) and removes the
// other generations a kill left behind.
func openSpool(base string, gen uint64, consumed int64) (*spool, error) {
	f, err := os.OpenFile(spoolPath(base, gen), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log relay spool: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("log relay spool: %w", err)
	}
	old, _ := filepath.Glob(base + ".*")
	for _, p := range old {
		if p != f.Name() {
			_ = os.Remove(p)
		}
	}
	sp := &spool{base: base, f: f, gen: gen, end: st.Size(), consumed: min(consumed, st.Size())}
	return sp, nil
}

// unprocessed is what a previous relay took from the pipe but had not
// written as lines: the partial line it held and whatever came after it.
func (sp *spool) unprocessed() ([]byte, error) {
	b := make([]byte, sp.end-sp.consumed)
	if len(b) == 0 {
		return nil, nil
	}
	if _, err := sp.f.ReadAt(b, sp.consumed); err != nil {
		return nil, fmt.Errorf("log relay spool: %w", err)
	}
	return b, nil
}

// rotate starts the next spool generation with the pending tail once the
// spool is large. The record saved in between names the new generation,
// so at any kill the record and an existing spool agree.
func (c *criStream) rotate() error {
	sp := c.sp
	if sp == nil || sp.end < spoolMax {
		return nil
	}
	next := sp.gen + 1
	f, err := os.OpenFile(spoolPath(sp.base, next), os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("log relay spool: %w", err)
	}
	if _, err := f.WriteAt(c.pending, 0); err != nil {
		f.Close()
		return fmt.Errorf("log relay spool: %w", err)
	}
	if err := c.lf.write(nil, c.rec, next, 0); err != nil {
		f.Close()
		return err
	}
	old := sp.f.Name()
	sp.f.Close()
	_ = os.Remove(old)
	sp.f, sp.gen, sp.end, sp.consumed = f, next, int64(len(c.pending)), 0
	return nil
}

// close removes the spool of a finished stream.
func (sp *spool) close() {
	if sp != nil && sp.f != nil {
		sp.f.Close()
		_ = os.Remove(sp.f.Name())
	}
}
