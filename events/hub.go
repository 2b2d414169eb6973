// Package events carries container lifecycle events to CRI
// GetContainerEvents subscribers: the container manager publishes CREATED,
// STARTED and DELETED, the unit translator turns systemd unit state changes
// into STOPPED, and the Hub fans them out without ever blocking a publisher.
package events

import (
	"fmt"
	"sync"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Event is one container lifecycle event. Statuses are attached when the
// event is sent to a CRI client, not here, so the hub stays cheap.
type Event struct {
	Type         runtimeapi.ContainerEventType
	ContainerID  string
	PodSandboxID string
	// CreatedAt is the event time in Unix nanoseconds.
	CreatedAt int64
}

// NewEvent stamps an event with the current time.
func NewEvent(t runtimeapi.ContainerEventType, containerID, podID string) Event {
	return Event{Type: t, ContainerID: containerID, PodSandboxID: podID, CreatedAt: time.Now().UnixNano()}
}

// ErrSlowSubscriber ends a subscription whose reader fell behind by more
// than its buffer: podunit never waits for a subscriber.
var ErrSlowSubscriber = fmt.Errorf("container event subscriber fell behind and was dropped: %w", errdefs.ErrResourceExhausted)

// ErrHubClosed ends subscriptions when podunit shuts down.
var ErrHubClosed = fmt.Errorf("container event hub closed: %w", errdefs.ErrUnavailable)

var (
	published = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "podunit", Subsystem: "events", Name: "container_events_total",
		Help: "Container events published, by type.",
	}, []string{"type"})
	dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "podunit", Subsystem: "events", Name: "subscribers_dropped_total",
		Help: "GetContainerEvents subscribers dropped for falling behind.",
	})
)

// The hub's backlog defaults. cri keeps removed pods' statuses as long,
// so that a replayed event still finds its pod's.
const (
	DefaultBacklog    = 4096
	DefaultBacklogTTL = 10 * time.Minute
)

// HubOptions size the hub's queues.
type HubOptions struct {
	// Buffer is each subscriber's queue length. Default 1024.
	Buffer int
	// Backlog keeps up to this many events published before the first
	// subscriber ever arrived (podunit just restarted, the kubelet has not
	// reconnected yet) and hands them to that subscriber, so exits found
	// on restart are reported once instead of never. Default 4096; events
	// older than BacklogTTL (default 10 min) are not replayed.
	Backlog    int
	BacklogTTL time.Duration
}

// Hub fans events out to subscribers.
type Hub struct {
	opts HubOptions

	mu      sync.Mutex
	subs    map[*Subscription]struct{}
	backlog []Event
	served  bool // a subscriber has existed: backlog no longer kept
	closed  bool
}

// NewHub returns an empty hub.
func NewHub(opts HubOptions) *Hub {
	if opts.Buffer <= 0 {
		opts.Buffer = 1024
	}
	if opts.Backlog <= 0 {
		opts.Backlog = DefaultBacklog
	}
	if opts.BacklogTTL <= 0 {
		opts.BacklogTTL = DefaultBacklogTTL
	}
	return &Hub{opts: opts, subs: map[*Subscription]struct{}{}}
}

// Publish delivers ev to every subscriber without blocking. A subscriber
// whose queue is full is dropped with ErrSlowSubscriber.
func (h *Hub) Publish(ev Event) {
	if ev.CreatedAt == 0 {
		ev.CreatedAt = time.Now().UnixNano()
	}
	published.WithLabelValues(ev.Type.String()).Inc()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if !h.served {
		if len(h.backlog) == h.opts.Backlog {
			h.backlog = h.backlog[1:]
		}
		h.backlog = append(h.backlog, ev)
	}
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			dropped.Inc()
			h.endLocked(s, ErrSlowSubscriber)
		}
	}
}

// Subscribe starts a subscription. The first subscriber after start also
// receives the backlog.
func (h *Hub) Subscribe() *Subscription {
	s := &Subscription{hub: h}
	h.mu.Lock()
	defer h.mu.Unlock()
	var replay []Event
	if !h.served {
		h.served = true
		cutoff := time.Now().Add(-h.opts.BacklogTTL).UnixNano()
		for _, ev := range h.backlog {
			if ev.CreatedAt >= cutoff {
				replay = append(replay, ev)
			}
		}
		h.backlog = nil
	}
	s.ch = make(chan Event, h.opts.Buffer+len(replay))
	for _, ev := range replay {
		s.ch <- ev
	}
	if h.closed {
		s.err = ErrHubClosed
		close(s.ch)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

// Subscribers is the number of live subscriptions.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Close ends every subscription with ErrHubClosed; later Publish calls are
// ignored.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		h.endLocked(s, ErrHubClosed)
	}
}

func (h *Hub) endLocked(s *Subscription, err error) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	s.err = err
	close(s.ch)
}

// Subscription is one subscriber's view of the hub.
type Subscription struct {
	hub *Hub
	ch  chan Event
	err error // set under hub.mu before ch is closed
}

// Events yields the events in publication order. It is closed when the
// subscription ends; Err then says why.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Err is nil while the subscription lives or after Close, otherwise
// ErrSlowSubscriber or ErrHubClosed. Read it after Events is closed.
func (s *Subscription) Err() error {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.err
}

// Close ends the subscription; its channel is closed.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.endLocked(s, nil)
}

// Collectors returns the package's metrics; the subscriber gauge is
// registered by whoever owns the Hub (metrics.GaugeFunc over Subscribers).
func Collectors() []prometheus.Collector { return []prometheus.Collector{published, dropped} }
