package events

import (
	"errors"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	created = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	started = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	stopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	deleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

func TestHubFanOutInOrder(t *testing.T) {
	h := NewHub(HubOptions{Buffer: 100})
	h.Subscribe().Close() // consumes the (empty) backlog
	a, b := h.Subscribe(), h.Subscribe()
	if h.Subscribers() != 2 {
		t.Fatalf("subscribers = %d", h.Subscribers())
	}
	for i, typ := range []runtimeapi.ContainerEventType{created, started, stopped, deleted} {
		h.Publish(Event{Type: typ, ContainerID: "c", PodSandboxID: "p", CreatedAt: int64(i + 1)})
	}
	for _, s := range []*Subscription{a, b} {
		for i, want := range []runtimeapi.ContainerEventType{created, started, stopped, deleted} {
			ev := <-s.Events()
			if ev.Type != want || ev.CreatedAt != int64(i+1) {
				t.Fatalf("event %d = %+v, want %v", i, ev, want)
			}
		}
	}
	a.Close()
	if _, ok := <-a.Events(); ok || a.Err() != nil {
		t.Fatalf("closed subscription: err %v", a.Err())
	}
	if h.Subscribers() != 1 {
		t.Fatalf("subscribers after close = %d", h.Subscribers())
	}
}

func TestHubDropsSlowSubscriber(t *testing.T) {
	h := NewHub(HubOptions{Buffer: 2})
	h.Subscribe().Close()
	slow, fast := h.Subscribe(), h.Subscribe()
	var got []Event
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ev := range fast.Events() {
			got = append(got, ev)
			if len(got) == 10 {
				return
			}
		}
	}()
	for i := range 10 {
		h.Publish(NewEvent(started, "c", "p"))
		// Give the fast reader room; the slow one never reads.
		for len(fast.ch) > 0 {
			time.Sleep(time.Millisecond)
		}
		_ = i
	}
	wg.Wait()
	if len(got) != 10 {
		t.Fatalf("fast subscriber got %d events", len(got))
	}
	n := 0
	for range slow.Events() {
		n++
	}
	if n != 2 || !errors.Is(slow.Err(), ErrSlowSubscriber) {
		t.Fatalf("slow subscriber: %d buffered, err %v", n, slow.Err())
	}
	if h.Subscribers() != 1 {
		t.Fatalf("subscribers = %d", h.Subscribers())
	}
	slow.Close() // after being dropped: harmless, keeps the reason
	if !errors.Is(slow.Err(), ErrSlowSubscriber) {
		t.Fatal("Close after drop lost the reason")
	}
}

func TestHubBacklogReplayedOnceToFirstSubscriber(t *testing.T) {
	h := NewHub(HubOptions{Backlog: 2, BacklogTTL: time.Minute})
	old := NewEvent(stopped, "ancient", "p")
	old.CreatedAt = time.Now().Add(-time.Hour).UnixNano()
	h.Publish(old)
	h.Publish(NewEvent(stopped, "c1", "p"))
	h.Publish(NewEvent(stopped, "c2", "p"))
	h.Publish(NewEvent(stopped, "c3", "p")) // backlog keeps the newest 2
	first := h.Subscribe()
	for _, want := range []string{"c2", "c3"} {
		if ev := <-first.Events(); ev.ContainerID != want {
			t.Fatalf("replayed %q, want %q", ev.ContainerID, want)
		}
	}
	if len(first.Events()) != 0 {
		t.Fatal("extra events replayed")
	}
	second := h.Subscribe()
	if len(second.Events()) != 0 {
		t.Fatal("backlog replayed twice")
	}
	h.Publish(NewEvent(deleted, "c3", "p"))
	if len(second.Events()) != 1 || len(first.Events()) != 1 {
		t.Fatal("live event not delivered after replay")
	}
}

func TestHubClose(t *testing.T) {
	h := NewHub(HubOptions{})
	s := h.Subscribe()
	h.Close()
	if _, ok := <-s.Events(); ok || !errors.Is(s.Err(), ErrHubClosed) {
		t.Fatalf("after Close: err %v", s.Err())
	}
	h.Publish(NewEvent(created, "c", "p"))
	late := h.Subscribe()
	if _, ok := <-late.Events(); ok || !errors.Is(late.Err(), ErrHubClosed) {
		t.Fatal("subscription after Close is live")
	}
}
