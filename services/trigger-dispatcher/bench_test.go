package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// reportMedian reports the median of the per-delivery durations.
func reportMedian(b *testing.B, durations []time.Duration) {
	if len(durations) == 0 {
		return
	}
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Microseconds()), "p50-µs/delivery")
}

// BenchmarkWebhookDelivery measures the dispatcher's own HTTP path for one signed delivery to a
// local receiver that answers 204 at once: request build, HMAC signature, the network-policy
// check on dial (connections are reused), the POST and reading the answer.
func BenchmarkWebhookDelivery(b *testing.B) {
	rc := newReceiver(b, status(http.StatusNoContent))
	c := testWebhookClient(loopbackOpen)
	body := []byte(`{"cluster":{"name":"prod-eu","id":"c-1","url":"https://prod-eu.example.com"},"enforcement":{"name":"logging","repo":"https://git.example.com/logging.git","namespace":"default"},"rule":{"namespace":"team","name":"baseline"},"phase":"beforeInstall","deliveryId":"dlv_bench"}`)
	req := webhookRequest{ID: "dlv_bench", Phase: events.PhaseBeforeInstall, Endpoint: rc.URL(), Timeout: 5 * time.Second, Body: body, Key: []byte("bench-key")}
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		res, err := c.deliver(context.Background(), req)
		if err != nil || !res.Delivered {
			b.Fatalf("deliver = %+v, %v", res, err)
		}
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	reportMedian(b, durations)
}

// BenchmarkDispatchBeforeInstall measures one beforeInstall end to end through the running
// service, one at a time: the intent and its InstallGated are published, the dispatcher reads
// its delivery record, calls the local receiver, writes the record and publishes
// TriggerDelivered, which the benchmark receives.
func BenchmarkDispatchBeforeInstall(b *testing.B) {
	h := newHarness(b)
	startService(b, h.env())
	rc := newReceiver(b, status(http.StatusNoContent))
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		in := h.intent(fmt.Sprintf("seq-%d", i), "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL()}})
		start := time.Now()
		h.gated(in)
		h.waitOutcome(events.PhaseBeforeInstall, in.ID())
		durations = append(durations, time.Since(start))
		h.seen = h.seen[:0]
	}
	b.StopTimer()
	reportMedian(b, durations)
}

// BenchmarkDispatchThroughput publishes b.N gated intents for distinct clusters at once and reports
// how many beforeInstall deliveries per second the service completes (outcome event received).
func BenchmarkDispatchThroughput(b *testing.B) {
	h := newHarness(b)
	startService(b, h.env())
	rc := newReceiver(b, status(http.StatusNoContent))
	evs := make([]events.Event, 0, 2*b.N)
	for i := range b.N {
		in := h.intent(fmt.Sprintf("par-%d", i), "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL()}})
		evs = append(evs, in, h.gate(in, 0))
	}
	b.ResetTimer()
	start := time.Now()
	if err := h.pub.PublishAll(context.Background(), evs); err != nil {
		b.Fatal(err)
	}
	timeout := time.After(2 * time.Minute)
	for got := 0; got < b.N; {
		select {
		case <-h.outcomes:
			got++
		case <-timeout:
			b.Fatalf("%d of %d outcomes within 2 minutes", got, b.N)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
}
