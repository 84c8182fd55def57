package service

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// A writeWindow bounds a service's Kubernetes writes in flight (POST, PUT, PATCH, DELETE) by a
// limit that follows the API server's answers, the way TCP's congestion window follows a network:
//
//   - it starts at initialWriteWindow, the bound that kept a throttling server converging when it
//     was a fixed setting (docs/performance.md);
//   - until the server first answers 429, every write that succeeds while the window is full
//     widens it by one, so the window doubles with each round of writes (slow start);
//   - a 429 halves it (never below 1), and afterwards each full window of successes widens it by
//     one (additive increase, multiplicative decrease);
//   - only the first 429 of a round halves it: writes sent before the last halving already saw
//     the larger window, and their 429s say nothing new;
//   - a write that ends while the window has room to spare (no write waits and fewer are in
//     flight than allowed) does not widen it: a quiet service does not grow a limit it has never
//     tested, to spend it on the next burst.
//
// So an API server with room to spare gets as many writes as the service has work for (up to
// maxWriteWindow, and in practice each service's own concurrency, such as argo-syncer's
// SYNC_CONCURRENCY), and a server whose Priority and Fairness sheds load gets about as many as
// it serves, instead of a burst it can only answer with 429s that every writer then waits out.
// Reads are not bounded: they are rare (the services read through informers) and watches last.
// Nor are Lease writes (inWindow).
type writeWindow struct {
	mu       sync.Mutex
	limit    float64 // writes allowed in flight; its integer part is the bound
	inFlight int
	round    uint64 // halvings so far (0: slow start, no 429 yet); a write remembers its round
	waiting  []chan struct{}

	limitGauge, inFlightGauge prometheus.Gauge
}

const (
	initialWriteWindow = 16
	maxWriteWindow     = 1024
)

// writeTicket is what a write holds while it is in flight: the round it was sent in.
type writeTicket struct {
	round uint64
}

func newWriteWindow(limitGauge, inFlightGauge prometheus.Gauge) *writeWindow {
	w := &writeWindow{limit: initialWriteWindow, limitGauge: limitGauge, inFlightGauge: inFlightGauge}
	limitGauge.Set(initialWriteWindow)
	return w
}

// acquire waits for room in the window, or for ctx to end.
func (w *writeWindow) acquire(ctx context.Context) (writeTicket, error) {
	w.mu.Lock()
	if len(w.waiting) == 0 && w.inFlight < int(w.limit) {
		w.inFlight++
		w.inFlightGauge.Set(float64(w.inFlight))
		t := writeTicket{round: w.round}
		w.mu.Unlock()
		return t, nil
	}
	ready := make(chan struct{})
	w.waiting = append(w.waiting, ready)
	w.mu.Unlock()
	select {
	case <-ready:
		w.mu.Lock()
		defer w.mu.Unlock()
		return writeTicket{round: w.round}, nil
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-ready: // admitted as ctx ended: give the place back
			w.inFlight--
			w.wake()
		default:
			for i, c := range w.waiting {
				if c == ready {
					w.waiting = append(w.waiting[:i], w.waiting[i+1:]...)
					break
				}
			}
		}
		return writeTicket{}, ctx.Err()
	}
}

// writeAnswer is what became of a write, as far as the window is concerned.
type writeAnswer int

const (
	writeServed    writeAnswer = iota // any answer but 429 and 5xx: the server took the write
	writeThrottled                    // 429: the server shed it
	writeFailed                       // no answer, or 5xx: says nothing about the server's room
)

// answerOf classifies a round trip's outcome.
func answerOf(resp *http.Response, err error) writeAnswer {
	switch {
	case err != nil || resp.StatusCode >= 500:
		return writeFailed
	case resp.StatusCode == http.StatusTooManyRequests:
		return writeThrottled
	}
	return writeServed
}

// release ends a write and adjusts the window by its answer.
func (w *writeWindow) release(t writeTicket, answer writeAnswer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	used := len(w.waiting) > 0 || w.inFlight >= int(w.limit)
	w.inFlight--
	switch {
	case answer == writeThrottled && t.round == w.round:
		w.limit = max(1, float64(int(w.limit)/2))
		w.round++
	case answer != writeServed: // shed before the last halving, or failed
	case !used:
	case w.round == 0: // slow start
		w.limit = min(maxWriteWindow, w.limit+1)
	default:
		w.limit = min(maxWriteWindow, w.limit+1/w.limit)
	}
	w.limitGauge.Set(float64(int(w.limit)))
	w.wake()
}

// wake admits the writes that waited, first come first served, while the window has room, and
// updates the in-flight gauge; w.mu is held.
func (w *writeWindow) wake() {
	for len(w.waiting) > 0 && w.inFlight < int(w.limit) {
		w.inFlight++
		close(w.waiting[0])
		w.waiting = w.waiting[1:]
	}
	w.inFlightGauge.Set(float64(w.inFlight))
}

// inWindow says whether a request goes through the window: writes (POST, PUT, PATCH, DELETE),
// except those of Leases. A leader's renewal must never wait behind its own work: queued behind
// a hundred writes to a throttling server, it would miss its deadline and hand the lead over
// for nothing.
func inWindow(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return !strings.Contains(r.URL.Path, "/apis/coordination.k8s.io/") // also behind a path prefix
	}
	return false
}
