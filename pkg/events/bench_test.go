package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Benchmarks of the bus on a real nats-server with file storage. Run:
//
//	go test -run XXX -bench . -benchtime 20000x -count 5 ./pkg/events
//
// and compare medians (benchstat). Each reports events/s next to ns/op. hack/bench-bus.sh runs
// them against a nats-server binary (EVENTS_BENCH_NATS_URL) next to the stock `nats bench`.

// benchNATSURLEnv names a running nats-server the benchmarks use instead of an embedded one; the
// ENFORCEMENT stream on it is deleted and declared again before each benchmark.
const benchNATSURLEnv = "EVENTS_BENCH_NATS_URL"

// benchJetStream returns a JetStream client on an empty ENFORCEMENT stream with the topology
// applied: on the server named by EVENTS_BENCH_NATS_URL, else on an embedded one.
func benchJetStream(b *testing.B) jetstream.JetStream {
	b.Helper()
	url := os.Getenv(benchNATSURLEnv)
	if url == "" {
		_, js := connect(b, startNATS(b, ""), TopologyOptions{})
		return js
	}
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatalf("%s=%s: %v", benchNATSURLEnv, url, err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := redeclareStream(ctx, js); err != nil {
		b.Fatal(err)
	}
	return js
}

// redeclareStream deletes the ENFORCEMENT stream and declares the topology again, and makes sure
// every consumer starts without state. A consumer recreated right after its stream was deleted
// can inherit the deleted consumer's last flushed state (nats-server v2.15.3's file store: the old
// consumer's state write races with the stream deletion), for example "delivered 1, ack floor 0":
// the new consumer then believes stream sequence 1 is waiting for an ack, never delivers it and
// redelivers it only after AckWait (30 s), behind the later events of its key. Such a consumer is
// deleted and declared again.
func redeclareStream(ctx context.Context, js jetstream.JetStream) error {
	if err := js.DeleteStream(ctx, StreamName); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	topology := DefaultTopology(TopologyOptions{})
	for attempt := 1; ; attempt++ {
		if err := topology.Apply(ctx, js); err != nil {
			return err
		}
		stale, err := consumersWithState(ctx, js, topology)
		if err != nil || len(stale) == 0 {
			return err
		}
		if attempt == 5 {
			return fmt.Errorf("consumers %v still carry the deleted stream's state after %d declarations", stale, attempt)
		}
		for _, name := range stale {
			if err := js.DeleteConsumer(ctx, StreamName, name); err != nil {
				return err
			}
		}
	}
}

// consumersWithState names the consumers of topology on the ENFORCEMENT stream that record a
// delivery or an ack although the stream is new.
func consumersWithState(ctx context.Context, js jetstream.JetStream, topology Topology) ([]string, error) {
	var stale []string
	for _, c := range topology.Consumers {
		cons, err := js.Consumer(ctx, StreamName, c.Durable)
		if err != nil {
			return nil, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		if info.Delivered.Consumer != 0 || info.AckFloor.Consumer != 0 || info.NumAckPending != 0 {
			stale = append(stale, c.Durable)
		}
	}
	return stale, nil
}

func benchEvents(n, keys int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = appeared(fmt.Sprintf("cluster-%d", i%keys), uint64(i))
	}
	return evs
}

// reportEncodedSize reports the size of one encoded benchmark event on the wire: its JSON body
// and its header block (as nats.go writes it), which hack/bench-bus.sh gives the stock bench too.
func reportEncodedSize(b *testing.B, e Event) {
	m, err := Encode(e, "/bench", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	headers := len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			headers += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	b.ReportMetric(float64(len(m.Data)), "body-B/event")
	b.ReportMetric(float64(headers), "header-B/event")
}

// BenchmarkPublishAsync publishes with PublishAll in batches of 256, waiting for every ack.
func BenchmarkPublishAsync(b *testing.B) {
	js := benchJetStream(b)
	p := NewPublisher(js, "/bench")
	evs := benchEvents(b.N, 1000)
	b.ResetTimer()
	for i := 0; i < len(evs); i += 256 {
		if err := p.PublishAll(context.Background(), evs[i:min(i+256, len(evs))]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	reportEncodedSize(b, evs[len(evs)-1])
}

// BenchmarkPublishSync publishes one event at a time, waiting for each ack.
func BenchmarkPublishSync(b *testing.B) {
	js := benchJetStream(b)
	p := NewPublisher(js, "/bench")
	evs := benchEvents(b.N, 1000)
	b.ResetTimer()
	for _, e := range evs {
		if _, err := p.Publish(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkConsume measures the consumer end to end: pull, decode, per-key dispatch over 1,000
// keys, handler, ack; the events are published before the timer starts. cpu-µs/event is the client's
// CPU time per event, max-gap-ms the longest wait between two events handled.
func BenchmarkConsume(b *testing.B) {
	js := benchJetStream(b)
	if err := NewPublisher(js, "/bench").PublishAll(context.Background(), benchEvents(b.N, 1000)); err != nil {
		b.Fatal(err)
	}
	var handled, last, maxGap atomic.Int64
	done := make(chan struct{})
	b.ResetTimer()
	cpu := processCPU()
	last.Store(time.Now().UnixNano())
	c, err := Consume(context.Background(), js, func(context.Context, Event, Meta) error {
		now := time.Now().UnixNano()
		for gap := now - last.Swap(now); ; {
			if m := maxGap.Load(); gap <= m || maxGap.CompareAndSwap(m, gap) {
				break
			}
		}
		if handled.Add(1) == int64(b.N) {
			close(done)
		}
		return nil
	}, ConsumerOptions{Name: ConsumerRuleEngine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), b.N)
	}
	b.StopTimer()
	cpu = processCPU() - cpu
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if cpu > 0 {
		// The benchmark process's CPU time (every goroutine, the garbage collector included).
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/event")
	}
	// The longest wait between two events handled (or before the first): a stall shows here.
	b.ReportMetric(float64(maxGap.Load())/1e6, "max-gap-ms")
	_ = c.Stop(context.Background())
}

// TestRedeclareStreamStartsConsumersAfresh checks what the benchmarks rely on: after
// redeclareStream, the first event published is delivered at once, as its first delivery, even
// right after the deleted stream's consumer delivered and acknowledged an event of its own.
func TestRedeclareStreamStartsConsumersAfresh(t *testing.T) {
	ctx := context.Background()
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	p := NewPublisher(js, "/t")
	for round := range 200 {
		if err := p.PublishAll(ctx, benchEvents(1, 1)); err != nil {
			t.Fatal(err)
		}
		fetchOne(t, js, round) // delivers and acknowledges: the consumer has state to flush
		if err := redeclareStream(ctx, js); err != nil {
			t.Fatal(err)
		}
	}
}

// fetchOne fetches one message from the rule-engine consumer, fails unless it is stream
// sequence 1 on its first delivery, and acknowledges it.
func fetchOne(t *testing.T, js jetstream.JetStream, round int) {
	t.Helper()
	ctx := context.Background()
	cons, err := js.Consumer(ctx, StreamName, ConsumerRuleEngine)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		got++
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if md.Sequence.Stream != 1 || md.NumDelivered != 1 {
			t.Fatalf("round %d: got stream sequence %d delivery %d, want 1 delivery 1", round, md.Sequence.Stream, md.NumDelivered)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got == 0 {
		info, _ := cons.Info(ctx)
		t.Fatalf("round %d: the new stream's first event was not delivered; consumer delivered %+v, ack floor %+v, %d waiting for an ack",
			round, info.Delivered, info.AckFloor, info.NumAckPending)
	}
}

// BenchmarkDecode decodes the benchmark's encoded event, headers and body, as Consume does.
func BenchmarkDecode(b *testing.B) {
	m, err := Encode(benchEvents(1, 1)[0], "/bench", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(m.Subject, m.Header, m.Data); err != nil {
			b.Fatal(err)
		}
	}
}
