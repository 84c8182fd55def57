package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A replayed dead letter keeps the place of its original in the order of decisions: its
// DecisionSequence is the original's stream sequence, also when the replay failed and was
// dead-lettered and replayed again.
func TestReplayKeepsTheDecisionSequence(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	publish(t, NewPublisher(js, "/test"), appeared("c1", 1))
	var (
		mu    sync.Mutex
		metas []Meta
	)
	r := newRecorder(func(_ *ClusterAppeared, m Meta) error {
		mu.Lock()
		defer mu.Unlock()
		metas = append(metas, m)
		if len(metas) < 3 {
			return Permanent(errors.New("secret rancher not found"))
		}
		return nil
	})
	consume(t, js, r.handle, ConsumerOptions{})
	r.waitFor(t, 1)
	replay := func(n int) {
		t.Helper()
		dls := waitDeadLetters(t, js, ConsumerRuleEngine, n)
		if _, err := ReplayDeadLetter(context.Background(), js, dls[n-1].Sequence); err != nil {
			t.Fatal(err)
		}
		r.waitFor(t, 1)
	}
	replay(1) // fails again: a dead letter of the replay
	replay(2)
	mu.Lock()
	defer mu.Unlock()
	if len(metas) != 3 {
		t.Fatalf("%d deliveries, want 3", len(metas))
	}
	first := metas[0].Sequence
	for i, m := range metas {
		if m.DecisionSequence() != first {
			t.Errorf("delivery %d (stream sequence %d): decision sequence %d, want the original's %d", i+1, m.Sequence, m.DecisionSequence(), first)
		}
		if i > 0 && m.Sequence <= first {
			t.Errorf("delivery %d: stream sequence %d, want a new message after %d", i+1, m.Sequence, first)
		}
	}
}

func TestDecisionSequence(t *testing.T) {
	for _, tc := range []struct {
		seq, orig, want uint64
	}{
		{seq: 7, want: 7},           // an original message
		{seq: 9, orig: 4, want: 4},  // a replay of the message at 4
		{seq: 9, orig: 12, want: 9}, // a header claiming a later place is not believed
		{orig: 4, want: 4},          // decoded outside a consumer
		{},                          // unknown
	} {
		if got := (Meta{Sequence: tc.seq, OriginalSequence: tc.orig}).DecisionSequence(); got != tc.want {
			t.Errorf("Meta{Sequence: %d, OriginalSequence: %d}.DecisionSequence() = %d, want %d", tc.seq, tc.orig, got, tc.want)
		}
	}
}

// Decode reads the original sequence of a replay, and refuses a header that is not a number.
func TestDecodeReadsTheOriginalSequence(t *testing.T) {
	m, err := Encode(appeared("c1", 1), "/test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(HeaderDeadSequence, "42")
	_, meta, err := Decode(m.Subject, m.Header, m.Data)
	if err != nil || meta.OriginalSequence != 42 {
		t.Fatalf("decode: original sequence %d, %v", meta.OriginalSequence, err)
	}
	h := nats.Header{}
	for k, v := range m.Header {
		h[k] = v
	}
	h.Set(HeaderDeadSequence, "forty-two")
	if _, _, err := Decode(m.Subject, h, m.Data); !errors.Is(err, ErrInvalidEvent) || !strings.Contains(fmt.Sprint(err), HeaderDeadSequence+` "forty-two"`) {
		t.Fatalf("decode with a malformed %s: %v", HeaderDeadSequence, err)
	}
}
