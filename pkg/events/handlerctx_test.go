package events

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startCall makes the context of one handler call on parent, with its slot taken, as process
// does; end finishes the call.
func startCall(parent context.Context, sem chan struct{}, timeout time.Duration) (ctx *handlerContext, end func()) {
	ctx = &handlerContext{parent: parent, slot: slot{sem: sem}}
	ctx.slot.take()
	ctx.deadline = time.Now().Add(timeout)
	return ctx, func() {
		ctx.end(time.Now())
		ctx.slot.release()
	}
}

// waitDone fails unless ctx is done within a second, with err.
func waitDone(t *testing.T, ctx context.Context, want error) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
		t.Fatalf("context not done a second later (Err %v)", ctx.Err())
	}
	if err := ctx.Err(); !errors.Is(err, want) {
		t.Fatalf("Err() = %v, want %v", err, want)
	}
}

type testKey struct{}

// A handler's context behaves as the context.WithTimeout(context.WithValue(...)) it replaces:
// it ends at its deadline, with the parent (Abort), and when the handler returns, whether
// something waited on it from the start, looked at it late, or derived a context from it.
func TestHandlerContextEndsLikeAContextWithTimeout(t *testing.T) {
	base := context.WithValue(context.Background(), testKey{}, "parent's")
	sem := make(chan struct{}, 1)

	t.Run("deadline, waited on", func(t *testing.T) {
		ctx, end := startCall(base, sem, 50*time.Millisecond)
		defer end()
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > 50*time.Millisecond {
			t.Fatalf("Deadline() = %v, %v", d, ok)
		}
		if ctx.Err() != nil {
			t.Fatalf("Err() = %v before the deadline", ctx.Err())
		}
		waitDone(t, ctx, context.DeadlineExceeded)
	})
	t.Run("deadline, polled", func(t *testing.T) {
		ctx, end := startCall(base, sem, 20*time.Millisecond)
		defer end()
		time.Sleep(40 * time.Millisecond)
		if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err() = %v past the deadline", err)
		}
		waitDone(t, ctx, context.DeadlineExceeded)
	})
	t.Run("deadline, derived", func(t *testing.T) {
		ctx, end := startCall(base, sem, 50*time.Millisecond)
		defer end()
		child, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		if d, _ := child.Deadline(); !d.Equal(ctx.deadline) {
			t.Fatalf("derived deadline %v, want the handler's %v", d, ctx.deadline)
		}
		waitDone(t, child, context.DeadlineExceeded)
		if child.Value(testKey{}) != "parent's" || child.Value(slotKey{}) != &ctx.slot {
			t.Fatal("a derived context does not carry the parent's values and the slot")
		}
	})
	t.Run("abort", func(t *testing.T) {
		parent, abort := context.WithCancel(base)
		ctx, end := startCall(parent, sem, time.Hour)
		defer end()
		done := ctx.Done()
		abort()
		<-done
		waitDone(t, ctx, context.Canceled)
	})
	t.Run("abort, looked at late", func(t *testing.T) {
		parent, abort := context.WithCancel(base)
		ctx, end := startCall(parent, sem, time.Hour)
		defer end()
		abort()
		waitDone(t, ctx, context.Canceled)
	})
	t.Run("return", func(t *testing.T) {
		ctx, end := startCall(base, sem, time.Hour)
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		end()
		waitDone(t, child, context.Canceled)
		waitDone(t, ctx, context.Canceled)
	})
	t.Run("return, looked at after the deadline", func(t *testing.T) {
		ctx, end := startCall(base, sem, 20*time.Millisecond)
		end()
		time.Sleep(40 * time.Millisecond)
		waitDone(t, ctx, context.Canceled) // it ended before its deadline
		if ctx.Value(testKey{}) != "parent's" {
			t.Fatal("a context kept after return lost the parent's values")
		}
	})
	t.Run("return after the deadline", func(t *testing.T) {
		ctx, end := startCall(base, sem, 10*time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		end()
		waitDone(t, ctx, context.DeadlineExceeded)
	})
	if len(sem) != 0 {
		t.Fatalf("%d slots still taken after every call returned", len(sem))
	}
}

// Each call has a context of its own: a context a handler kept (or a goroutine it started still
// holds) stays cancelled after the call returned, whatever the next calls on the same worker do,
// and Idle on it after the return takes no slot.
func TestHandlerContextIsNotReused(t *testing.T) {
	sem := make(chan struct{}, 1)
	kept, end := startCall(context.Background(), sem, time.Hour)
	var watcher sync.WaitGroup
	watcher.Go(func() { <-kept.Done() })
	end()
	watcher.Wait()
	for range 3 {
		ctx, end := startCall(context.Background(), sem, time.Hour)
		if ctx == kept || ctx.Err() != nil {
			t.Fatalf("next call's context %p: Err %v, kept %p", ctx, ctx.Err(), kept)
		}
		Idle(ctx, func() {
			if len(sem) != 0 {
				t.Error("Idle did not give the slot back")
			}
		})
		end()
		waitDone(t, kept, context.Canceled)
	}
	Idle(kept, func() {})
	if len(sem) != 0 {
		t.Fatal("Idle on a context kept after its call returned took a slot for good")
	}
}

// A handler running past HandlerTimeout finds its context cancelled with DeadlineExceeded, a
// second later attempt gets a fresh context, and a context the consumer passed keeps the values
// of the context given to Consume.
func TestConsumeCancelsASlowHandlerAtHandlerTimeout(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	publish(t, NewPublisher(js, "/test"), appeared("a", 1))
	type call struct {
		err   error
		value any
		ctx   context.Context
	}
	calls := make(chan call, 2)
	var n atomic.Int32
	parent := context.WithValue(context.Background(), testKey{}, "consume's")
	c, err := Consume(parent, js, func(ctx context.Context, _ Event, _ Meta) error {
		if n.Add(1) == 1 {
			<-ctx.Done() // the first attempt waits for its timeout
		}
		calls <- call{ctx.Err(), ctx.Value(testKey{}), ctx}
		return ctx.Err()
	}, ConsumerOptions{Name: ConsumerRuleEngine, HandlerTimeout: 100 * time.Millisecond, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	var got []call
	for range 2 {
		select {
		case c := <-calls:
			got = append(got, c)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d handler calls, want 2", len(got))
		}
	}
	if !errors.Is(got[0].err, context.DeadlineExceeded) || got[1].err != nil {
		t.Fatalf("first call's Err %v, second's %v: want the first past its timeout, the second fresh", got[0].err, got[1].err)
	}
	if got[0].value != "consume's" || got[1].value != "consume's" {
		t.Fatalf("handler contexts carry %v and %v, want the value of Consume's context", got[0].value, got[1].value)
	}
	waitDone(t, got[1].ctx, context.Canceled) // kept after its call returned
}

// Abort cancels the context of a handler in flight.
func TestConsumeAbortCancelsTheHandlersContext(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	publish(t, NewPublisher(js, "/test"), appeared("a", 1))
	started, ended := make(chan struct{}), make(chan error, 1)
	c := consume(t, js, func(ctx context.Context, _ Event, _ Meta) error {
		close(started)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		ended <- ctx.Err()
		return ctx.Err()
	}, ConsumerOptions{})
	<-started
	c.Abort()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's Err after Abort: %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled by Abort")
	}
}

// A message whose handler runs for several AckWaits is kept alive (InProgress) and not
// delivered again, and so is a later one, on the worker that parked last, which reuses its
// keep-alive timer.
func TestConsumeKeepsALongHandlersMessageAlive(t *testing.T) {
	pub, r := slowFirstDeliveries(t, 3)
	for rev := uint64(1); rev <= 2; rev++ {
		publish(t, pub, appeared("a", rev))
		if got, want := r.waitFor(t, 1)[0], fmt.Sprintf("a@%d#1", rev); got != want {
			t.Fatalf("handled %s, want %s", got, want)
		}
	}
	r.noneAgain(t)
}

// Messages queued behind a long handler's message of the same key are kept alive with it: each
// is handled once, in order, though it waits several AckWaits for its turn.
func TestConsumeKeepsQueuedMessagesAlive(t *testing.T) {
	pub, r := slowFirstDeliveries(t, 2)
	for rev := uint64(1); rev <= 3; rev++ {
		publish(t, pub, appeared("a", rev))
	}
	got := r.waitFor(t, 3)
	if want := []string{"a@1#1", "a@2#1", "a@3#1"}; !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	r.noneAgain(t)
}

// A burst of busy keys gets no more workers than Concurrency: the other keys wait, in the order
// they became busy, without a goroutine. Their messages are kept alive while they wait for
// several AckWaits, and each is then handled once.
func TestConsumeStartsAWorkerOnlyForAFreeSlot(t *testing.T) {
	const concurrency, keys = 2, 40
	_, js := connect(t, startNATS(t, ""), TopologyOptions{AckWait: keepAliveAckWait})
	release := make(chan struct{})
	r := newRecorder(func(_ *ClusterAppeared, m Meta) error {
		if m.NumDelivered == 1 {
			<-release
		}
		return nil
	})
	c := consume(t, js, r.handle, ConsumerOptions{Concurrency: concurrency})
	var evs []Event
	for i := range keys {
		evs = append(evs, appeared(fmt.Sprintf("k%02d", i), 1))
	}
	publish(t, NewPublisher(js, "/test"), evs...)
	ready := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.ready) - c.readyHead
	}
	deadline := time.Now().Add(10 * time.Second)
	for ready() < keys-concurrency && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ready(); n != keys-concurrency {
		t.Fatalf("%d keys wait for a worker, want %d", n, keys-concurrency)
	}
	if n := workerGoroutines(); n != concurrency {
		t.Fatalf("%d worker goroutines for %d busy keys, want %d (Concurrency)", n, keys, concurrency)
	}
	time.Sleep(3 * keepAliveAckWait) // the waiting keys' messages would be redelivered by now
	close(release)
	got := r.waitFor(t, keys)
	for _, s := range got {
		if !strings.HasSuffix(s, "#1") {
			t.Fatalf("handled %v; want each message once, on its first delivery", got)
		}
	}
	r.noneAgain(t)
}

// workerGoroutines counts the goroutines running a consumer worker.
func workerGoroutines() int {
	buf := make([]byte, 1<<22)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "events.(*worker).run(")
}

// keepAliveAckWait is the AckWait of the keep-alive tests: short, so that a message not kept
// alive comes again within the test.
const keepAliveAckWait = 600 * time.Millisecond

// slowFirstDeliveries starts a consumer, on a stream with keepAliveAckWait, whose handler holds
// each first delivery for the given number of AckWaits and handles a redelivery at once (so that
// noneAgain sees it), and returns a publisher and the handler's recorder.
func slowFirstDeliveries(t *testing.T, ackWaits int) (*Publisher, *recorder) {
	t.Helper()
	_, js := connect(t, startNATS(t, ""), TopologyOptions{AckWait: keepAliveAckWait})
	r := newRecorder(func(_ *ClusterAppeared, m Meta) error {
		if m.NumDelivered == 1 {
			time.Sleep(time.Duration(ackWaits) * keepAliveAckWait)
		}
		return nil
	})
	consume(t, js, r.handle, ConsumerOptions{})
	return NewPublisher(js, "/test"), r
}

// noneAgain fails the test if the handler is called again within two keepAliveAckWaits.
func (r *recorder) noneAgain(t *testing.T) {
	t.Helper()
	select {
	case extra := <-r.signal:
		t.Fatalf("a message came again: %s", extra)
	case <-time.After(2 * keepAliveAckWait):
	}
}

// A key's queue keeps its order and, once emptied, starts again at the front of its array, which
// the next key to use the queue gets with it.
func TestKeyQueueReusesItsArray(t *testing.T) {
	var q keyQueue
	m := []*delivery{{}, {}, {}}
	q.msgs = append(q.msgs, m[0], m[1])
	q.pop()
	q.msgs = append(q.msgs, m[2])
	for _, want := range m[1:] {
		if q.len() == 0 || q.msgs[q.head] != want {
			t.Fatal("messages out of order")
		}
		q.pop()
	}
	if q.len() != 0 || q.head != 0 || cap(q.msgs) == 0 {
		t.Fatalf("emptied queue: len %d, head %d, cap %d; want it back at the front of its array", q.len(), q.head, cap(q.msgs))
	}
}
