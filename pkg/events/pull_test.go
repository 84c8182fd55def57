package events

import (
	"context"

	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestConsumeGoesOnAfterTheServerRestarts checks that the consumer asks for messages again after
// a reconnection, when the server has forgotten its pull requests, and keeps every key's order.
func TestConsumeGoesOnAfterTheServerRestarts(t *testing.T) {
	dir := t.TempDir()
	s := startNATS(t, dir)
	port := s.Addr().(*net.TCPAddr).Port
	_, js := connect(t, s, TopologyOptions{}, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newRecorder(nil)
	c := consume(t, js, r.handle, ConsumerOptions{})
	defer func() { _ = c.Stop(ctx) }() // before the second server's shutdown, registered later
	p := NewPublisher(js, "/test")
	const keys, perRound = 10, 300 // more than one pull's worth each round
	events := func(round int) []Event {
		evs := make([]Event, perRound)
		for i := range evs {
			evs[i] = appeared("c"+strconv.Itoa(i%keys), uint64(round*perRound+i))
		}
		return evs
	}
	publish(t, p, events(0)...)
	r.waitFor(t, perRound)
	// So that the restart redelivers nothing:
	waitRuleEngineConsumer(ctx, t, js, "every delivered message is acknowledged",
		func(i *jetstream.ConsumerInfo) bool { return i.NumAckPending == 0 })

	s.Shutdown()
	s.WaitForShutdown()
	s2, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s2.Start()
	t.Cleanup(s2.Shutdown)
	if !s2.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start again")
	}
	publish(t, p, events(1)...)
	r.waitFor(t, perRound)

	last := map[string]int{}
	for _, entry := range r.snapshot() {
		key, rest, _ := strings.Cut(entry, "@")
		revision, delivery, _ := strings.Cut(rest, "#")
		rev, err := strconv.Atoi(revision)
		if err != nil || delivery != "1" {
			t.Fatalf("entry %q: want a first delivery", entry)
		}
		if prev, ok := last[key]; ok && rev <= prev {
			t.Fatalf("key %s: revision %d handled after %d", key, rev, prev)
		}
		last[key] = rev
	}
}

// waitRuleEngineConsumer waits until the server's info of the rule engine's consumer satisfies
// done (what says what is awaited, for the failure).
func waitRuleEngineConsumer(ctx context.Context, t *testing.T, js jetstream.JetStream, what string, done func(*jetstream.ConsumerInfo) bool) {
	t.Helper()
	cons, err := js.Consumer(ctx, StreamName, ConsumerRuleEngine)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if done(info) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting until %s: the consumer has %d pending, %d waiting for an ack", what, info.NumPending, info.NumAckPending)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ackSequences reads the stream sequence and the delivery count as nats.go's Metadata does, from
// the ack subjects of old and new servers, and refuses what Metadata refuses.
func TestAckSequencesReadsWhatMetadataReads(t *testing.T) {
	for _, reply := range []string{
		"$JS.ACK.ENFORCEMENT.rule-engine.3.1042.77.1764842400000000000.12",
		"$JS.ACK._.hash.ENFORCEMENT.rule-engine.1.7.7.1764842400000000000.0.token",
		"$JS.ACK.domain.hash.ENFORCEMENT.rule-engine.2.18446744073709551615.9.1764842400000000000.0",
		"$JS.ACK.domain.hash.ENFORCEMENT.rule-engine.2.5.9.1764842400000000000.0.token.more",
		"$JS.ACK.ENFORCEMENT.rule-engine.x.1042.77.1764842400000000000.12",
		"$JS.ACK.ENFORCEMENT.rule-engine.3.-1.77.1764842400000000000.12",
		"$JS.ACK.ENFORCEMENT.rule-engine.3..77.1764842400000000000.12",
		"$JS.ACK.ENFORCEMENT.rule-engine.3.1042.77.1764842400000000000",
		"$JS.ACK.a.b.ENFORCEMENT.rule-engine.3.1042.77.1764842400000000000",
		"$JS.NAK.ENFORCEMENT.rule-engine.3.1042.77.1764842400000000000.12",
		"_INBOX.abc",
	} {
		seq, delivered, ok := ackSequences(reply)
		md, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		if ok != (err == nil) {
			t.Errorf("%s: ok %v, Metadata's error %v", reply, ok, err)
			continue
		}
		if ok && (seq != md.Sequence.Stream || delivered != md.NumDelivered) {
			t.Errorf("%s: sequence %d delivered %d, Metadata reads %d and %d", reply, seq, delivered, md.Sequence.Stream, md.NumDelivered)
		}
	}
}
