package eventstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// Occurrences searches every message kept by every stream of the server (so every event, every
// dead letter and every revision of every KV bucket, whose values are stream messages too) for
// needle, in its subject, headers and data, and names each message that contains it
// ("<stream> #<sequence> <subject>"). Canary tests use it to prove that a secret was stored
// nowhere.
func Occurrences(t testing.TB, js jetstream.JetStream, needle string) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		err := EachMessage(ctx, js, name, func(m *jetstream.RawStreamMsg) {
			if strings.Contains(m.Subject, needle) || strings.Contains(string(m.Data), needle) ||
				strings.Contains(fmt.Sprint(m.Header), needle) {
				found = append(found, fmt.Sprintf("%s #%d %s", name, m.Sequence, m.Subject))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	return found
}

// EachMessage calls fn with every message the stream keeps, oldest first, skipping the deleted
// ones (and the revisions of a key that a newer one purged). It stops at the first error.
func EachMessage(ctx context.Context, js jetstream.JetStream, stream string, fn func(*jetstream.RawStreamMsg)) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("stream %s message %d: %w", stream, seq, err)
		}
		fn(m)
	}
	return nil
}

// Messages counts the messages Occurrences would search: what a canary test searched through.
func Messages(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := context.Background()
	var n uint64
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		n += s.CachedInfo().State.Msgs
	}
	if err := names.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	return n
}
