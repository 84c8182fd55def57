package eventstest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Reopen opens the ENFORCEMENT stream again through js, typically a new connection after the
// NATS server restarted, and keeps the reader's position: the next call of New returns the
// events stored after the last one it returned before.
func (r *Reader) Reopen(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	stream, err := js.Stream(context.Background(), events.StreamName)
	if err != nil {
		t.Fatalf("open stream %s: %v", events.StreamName, err)
	}
	r.stream = stream
}
