package events

import (
	"context"
	"sync"
	"time"
)

// handlerContext is the context of one handler call: a child of Consumer.handlerCtx (which Abort
// cancels) with the HandlerTimeout deadline and the call's concurrency slot as a value.
//
// It is what context.WithTimeout(context.WithValue(parent, slotKey{}, slot), timeout) gives, in
// one allocation and without a timer: most handlers never wait on their context, and the timer,
// the value context and the timeout context were a quarter of the consumer's own CPU per message
// (BenchmarkConsume). The standard context that enforces the deadline, inner, is made only when
// something needs it: a call to Done (a select, a derived context, an HTTP request), or Err or
// Value once the context is over. Until then Err compares the clock with the deadline and looks
// at the parent, which is all a context that nobody waits on has to answer.
//
// A handlerContext serves one call and is never reused: a handler may keep it, or hand it to a
// goroutine, past its return, and must then find it cancelled.
type handlerContext struct {
	parent   context.Context
	deadline time.Time
	slot     slot

	mu     sync.Mutex
	inner  context.Context    // nil until needed
	cancel context.CancelFunc // inner's
	ended  bool               // the handler returned
	late   bool               // ... at or after the deadline
}

func (h *handlerContext) Deadline() (time.Time, bool) { return h.deadline, true }

func (h *handlerContext) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.innerLocked().Done()
}

func (h *handlerContext) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inner == nil && h.liveLocked() {
		return nil
	}
	return h.innerLocked().Err()
}

// Value answers the slot itself and asks the parent, or inner once made, for anything else.
// Inner must answer once it exists: a context derived from h finds through Value(&cancelCtxKey)
// that h's Done channel is inner's, and then registers with inner like with any standard
// context, instead of starting a goroutine to watch h.
func (h *handlerContext) Value(key any) any {
	if _, ok := key.(slotKey); ok {
		return &h.slot
	}
	h.mu.Lock()
	c := h.inner
	if c == nil && !h.liveLocked() {
		c = h.innerLocked()
	}
	h.mu.Unlock()
	if c == nil {
		c = h.parent
	}
	return c.Value(key)
}

// liveLocked reports whether h is not over yet: neither returned from, nor aborted, nor past its
// deadline. h.mu is held.
func (h *handlerContext) liveLocked() bool {
	return !h.ended && h.parent.Err() == nil && time.Now().Before(h.deadline)
}

// innerLocked returns inner, made on first use in the state h is in: a context that ends at the
// deadline, or with the parent, or already cancelled (with the error the call ended with) if the
// handler returned. h.mu is held.
func (h *handlerContext) innerLocked() context.Context {
	if h.inner == nil {
		if h.ended && !h.late {
			// Ended before its deadline: Canceled, as a cancel() at return gave, even if the
			// deadline has passed since.
			h.inner, h.cancel = context.WithCancel(h.parent)
		} else {
			h.inner, h.cancel = context.WithDeadline(h.parent, h.deadline)
		}
		if h.ended {
			h.cancel()
		}
	}
	return h.inner
}

// end marks the call as returned at now: h is cancelled from then on, and inner, if it was made,
// is released.
func (h *handlerContext) end(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended, h.late = true, !now.Before(h.deadline)
	if h.cancel != nil {
		h.cancel()
	}
}

// slot is one of the Concurrency places a handler runs in, as held by one handler call.
type slot struct {
	sem chan struct{}
	// consumer, if set, is told when the handler waits in Idle (Consumer.waitBegins).
	consumer *Consumer
	held     bool
	done     bool // the call returned: the slot is not taken again
}

func (s *slot) take() {
	if !s.held && !s.done {
		s.sem <- struct{}{}
		s.held = true
	}
}

func (s *slot) give() {
	if s.held {
		<-s.sem
		s.held = false
	}
}

// release gives the slot back for good, when the call returns.
func (s *slot) release() {
	s.give()
	s.done = true
}

// slotKey is the context key of the handler call's slot.
type slotKey struct{}

// Idle runs wait, typically a sleep before the handler's own next try, with the calling
// handler's concurrency slot given back, and takes a slot again before it returns (waiting for
// one if all are busy). So a handler that waits, such as a webhook delivery between two
// attempts, does not hold up the handlers of other keys: Concurrency bounds the handlers that
// work, not those that wait. The handler's key stays blocked meanwhile, which keeps its order.
// ctx must be the context the Consumer passed to the handler (or derived from it); with any
// other context Idle just runs wait. Call it from the handler's own goroutine only.
func Idle(ctx context.Context, wait func()) {
	s, ok := ctx.Value(slotKey{}).(*slot)
	if !ok {
		wait()
		return
	}
	s.give()
	if s.consumer != nil {
		s.consumer.waitBegins()
	}
	defer func() {
		if s.consumer != nil {
			s.consumer.waitEnds()
		}
		s.take()
	}()
	wait()
}
