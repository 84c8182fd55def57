package eventstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// CaughtUp waits until the durable consumer of the ENFORCEMENT stream has been delivered and
// has acknowledged every event stored so far, and fails the test if that has not happened
// within timeout (naming the pending counts) or the consumer cannot be read.
func CaughtUp(t testing.TB, js jetstream.JetStream, consumer string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		c, err := js.Consumer(ctx, events.StreamName, consumer)
		if err != nil {
			t.Fatalf("open consumer %s: %v", consumer, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatalf("read consumer %s: %v", consumer, err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s not caught up within %s: pending %d, ack pending %d", consumer, timeout, info.NumPending, info.NumAckPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
