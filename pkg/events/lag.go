package events

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// lagTimeout bounds the consumer info requests of one scrape.
const lagTimeout = 2 * time.Second

// ConsumerLag reports the backlog of a service's durable consumers, read from the server at
// every scrape (as an exporter does, so the numbers are the server's and never stale):
//
//	enforcement_<service>_consumer_pending_messages{consumer}       in the stream, not delivered to the consumer yet
//	enforcement_<service>_consumer_ack_pending_messages{consumer}   delivered, not acknowledged yet (in flight or waiting for a retry)
//	enforcement_<service>_consumer_info_errors_total{consumer}      scrapes whose consumer info request failed (the gauges are then missing)
//
// The values are the consumer's, not the replica's: every replica of a service reports the same
// numbers (aggregate with max, not sum). The label is the durable consumer's name, one or two
// per service.
type ConsumerLag struct {
	js                  jetstream.JetStream
	pending, ackPending *prometheus.Desc
	errors              *prometheus.CounterVec
	mu                  sync.Mutex
	consumers           []string
}

// NewConsumerLag registers the consumer lag metrics of service ("rule-engine"; '-' becomes '_')
// on reg. Consumers are reported once added with Add.
func NewConsumerLag(reg prometheus.Registerer, service string, js jetstream.JetStream) *ConsumerLag {
	prefix := "enforcement_" + strings.ReplaceAll(service, "-", "_") + "_consumer_"
	l := &ConsumerLag{
		js: js,
		pending: prometheus.NewDesc(prefix+"pending_messages",
			"Messages in the stream the durable consumer has not been delivered yet (its lag), as the server reports it.", []string{"consumer"}, nil),
		ackPending: prometheus.NewDesc(prefix+"ack_pending_messages",
			"Messages delivered to the durable consumer and not acknowledged yet (in flight or waiting for a retry).", []string{"consumer"}, nil),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "info_errors_total",
			Help: "Scrapes whose request for the consumer's info failed; its lag gauges are missing from that scrape."}, []string{"consumer"}),
	}
	reg.MustRegister(l)
	return l
}

// Add reports the durable consumer name from now on.
func (l *ConsumerLag) Add(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.consumers, name) {
		l.consumers = append(l.consumers, name)
	}
}

// Describe implements prometheus.Collector.
func (l *ConsumerLag) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.pending
	ch <- l.ackPending
	l.errors.Describe(ch)
}

// Collect implements prometheus.Collector: one consumer info request per consumer.
func (l *ConsumerLag) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	consumers := slices.Clone(l.consumers)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	for _, name := range consumers {
		info, err := l.info(ctx, name)
		if err != nil {
			l.errors.WithLabelValues(name).Inc()
			continue
		}
		ch <- prometheus.MustNewConstMetric(l.pending, prometheus.GaugeValue, float64(info.NumPending), name)
		ch <- prometheus.MustNewConstMetric(l.ackPending, prometheus.GaugeValue, float64(info.NumAckPending), name)
	}
	l.errors.Collect(ch)
}

func (l *ConsumerLag) info(ctx context.Context, name string) (*jetstream.ConsumerInfo, error) {
	c, err := l.js.Consumer(ctx, StreamName, name)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}
