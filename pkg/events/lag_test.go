package events

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConsumerLagReportsTheServersCounts: the lag gauges are the server's NumPending and
// NumAckPending of the durable consumer, read at the scrape; a consumer the server does not know
// counts an info error and reports no gauge; the metrics pass the naming linter.
func TestConsumerLagReportsTheServersCounts(t *testing.T) {
	s := startNATS(t, "")
	_, js := connect(t, s, TopologyOptions{})
	pub := NewPublisher(js, "/test")
	src := Cluster{Source: testSource, Key: "c-1", Name: "c1", URL: "https://c1", State: "active", Eligible: true}
	for i := range 3 {
		src.Key = "c-" + string(rune('a'+i))
		if _, err := pub.Publish(context.Background(), &ClusterAppeared{Cluster: src, Revision: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	// The server counts stored messages into a consumer's NumPending asynchronously: on a busy
	// machine its info right after the publishes may still say 0. The gauges report what the
	// server says at the scrape, so scrape once the server says 3.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitRuleEngineConsumer(ctx, t, js, "the server counts the 3 messages as pending",
		func(i *jetstream.ConsumerInfo) bool { return i.NumPending == 3 })
	reg := prometheus.NewPedanticRegistry()
	lag := NewConsumerLag(reg, "rule-engine", js)
	lag.Add(ConsumerRuleEngine)
	lag.Add("no-such-consumer")
	want := `
# HELP enforcement_rule_engine_consumer_ack_pending_messages Messages delivered to the durable consumer and not acknowledged yet (in flight or waiting for a retry).
# TYPE enforcement_rule_engine_consumer_ack_pending_messages gauge
enforcement_rule_engine_consumer_ack_pending_messages{consumer="rule-engine"} 0
# HELP enforcement_rule_engine_consumer_info_errors_total Scrapes whose request for the consumer's info failed; its lag gauges are missing from that scrape.
# TYPE enforcement_rule_engine_consumer_info_errors_total counter
enforcement_rule_engine_consumer_info_errors_total{consumer="no-such-consumer"} 1
# HELP enforcement_rule_engine_consumer_pending_messages Messages in the stream the durable consumer has not been delivered yet (its lag), as the server reports it.
# TYPE enforcement_rule_engine_consumer_pending_messages gauge
enforcement_rule_engine_consumer_pending_messages{consumer="rule-engine"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
