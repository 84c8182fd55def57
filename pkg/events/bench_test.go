package events

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of the bus on a real nats-server with file storage. Run:
//
//	go test -run XXX -bench . -benchtime 20000x -count 5 ./pkg/events
//
// and compare medians (benchstat). Each reports events/s next to ns/op.

func benchEvents(n, keys int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = appeared(fmt.Sprintf("cluster-%d", i%keys), uint64(i))
	}
	return evs
}

// BenchmarkPublishAsync publishes with PublishAll in batches of 256, waiting for every ack.
func BenchmarkPublishAsync(b *testing.B) {
	_, js := connect(b, startNATS(b, ""), TopologyOptions{})
	p := NewPublisher(js, "/bench")
	evs := benchEvents(b.N, 1000)
	b.ResetTimer()
	for i := 0; i < len(evs); i += 256 {
		if err := p.PublishAll(context.Background(), evs[i:min(i+256, len(evs))]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPublishSync publishes one event at a time, waiting for each ack.
func BenchmarkPublishSync(b *testing.B) {
	_, js := connect(b, startNATS(b, ""), TopologyOptions{})
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
// keys, handler, ack; the events are published before the timer starts.
func BenchmarkConsume(b *testing.B) {
	_, js := connect(b, startNATS(b, ""), TopologyOptions{})
	if err := NewPublisher(js, "/bench").PublishAll(context.Background(), benchEvents(b.N, 1000)); err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	done := make(chan struct{})
	b.ResetTimer()
	c, err := Consume(context.Background(), js, func(context.Context, Event, Meta) error {
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
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	_ = c.Stop(context.Background())
}
