// Package eventstest gives the tests of every service the same two views of the event bus: a
// JetStream client with Enforcement's topology applied (the stream, the consumers and the
// buckets exist, as they do once any service has started), and a reader of what was published
// since it last looked. It talks to a real NATS server (pkg/testenv starts one); nothing here is
// a fake.
package eventstest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Bus connects to the NATS server at url, applies events.DefaultTopology and returns the
// connection and its JetStream context. The connection is closed when the test ends; any error
// fails the test.
func Bus(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to NATS at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(context.Background(), js); err != nil {
		t.Fatalf("apply topology: %v", err)
	}
	return nc, js
}

// Reader reads the events stored in the ENFORCEMENT stream, in stream order.
type Reader struct {
	stream  jetstream.Stream
	lastSeq uint64
}

// NewReader opens the ENFORCEMENT stream. The first call of New returns every event stored so
// far.
func NewReader(t testing.TB, js jetstream.JetStream) *Reader {
	t.Helper()
	stream, err := js.Stream(context.Background(), events.StreamName)
	if err != nil {
		t.Fatalf("open stream %s: %v", events.StreamName, err)
	}
	return &Reader{stream: stream}
}

// New returns the events stored since the previous call, decoded; a message that does not
// decode fails the test, because every publisher of the stream is expected to follow the
// contract.
func (r *Reader) New(t testing.TB) []events.Event {
	t.Helper()
	ctx := context.Background()
	info, err := r.stream.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	var out []events.Event
	for seq := r.lastSeq + 1; seq <= info.State.LastSeq; seq++ {
		m, err := r.stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("read stream sequence %d: %v", seq, err)
		}
		e, _, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("decode stream sequence %d on %s: %v", seq, m.Subject, err)
		}
		out = append(out, e)
	}
	r.lastSeq = info.State.LastSeq
	return out
}
