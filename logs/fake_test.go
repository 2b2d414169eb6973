package logs

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// fakeJournal is an in-memory journal: entry i has seqnum i+1.
type fakeJournal struct {
	mu      sync.Mutex
	cond    *sync.Cond
	entries []Entry
	// batch caps how many entries a stream returns at once
	batch int
}

func newFakeJournal() *fakeJournal {
	j := &fakeJournal{batch: 3}
	j.cond = sync.NewCond(&j.mu)
	return j
}

func fakeCursor(seq uint64) string {
	return fmt.Sprintf("s=fake;i=%x;b=b;m=0;t=%x;x=0", seq, 1_700_000_000_000_000+seq)
}

func (j *fakeJournal) add(id string, s Stream, msg, lineBreak string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	seq := uint64(len(j.entries) + 1)
	c := fakeCursor(seq)
	pos, _ := ParseCursor(c)
	j.entries = append(j.entries, Entry{Cursor: c, Pos: pos, Time: timeOf(pos), ContainerID: id, Stream: s, Message: []byte(msg), LineBreak: lineBreak})
	j.cond.Broadcast()
}

func (j *fakeJournal) Follow(ctx context.Context, cursor string) (EntryStream, error) {
	p, err := ParseCursor(cursor)
	if err != nil {
		return nil, err
	}
	next := 0
	if !p.IsZero() {
		next = int(p.Seqnum) - 1 // inclusive
	}
	return &fakeStream{j: j, next: next}, nil
}

func (j *fakeJournal) Tail(context.Context) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.entries) == 0 {
		return "", nil
	}
	return j.entries[len(j.entries)-1].Cursor, nil
}

func (j *fakeJournal) Last(_ context.Context, id string) (Entry, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.entries) - 1; i >= 0; i-- {
		if j.entries[i].ContainerID == id {
			return j.entries[i], true, nil
		}
	}
	return Entry{}, false, nil
}

func (j *fakeJournal) Sync(context.Context) error { return nil }

type fakeStream struct {
	j      *fakeJournal
	next   int
	closed bool
}

func (s *fakeStream) Next() ([]Entry, error) {
	j := s.j
	j.mu.Lock()
	defer j.mu.Unlock()
	for !s.closed && s.next >= len(j.entries) {
		j.cond.Wait()
	}
	if s.closed {
		return nil, errors.New("stream closed")
	}
	end := min(len(j.entries), s.next+j.batch)
	out := append([]Entry(nil), j.entries[s.next:end]...)
	s.next = end
	return out, nil
}

func (s *fakeStream) Close() error {
	s.j.mu.Lock()
	s.closed = true
	s.j.cond.Broadcast()
	s.j.mu.Unlock()
	return nil
}
