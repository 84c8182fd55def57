package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

type apiextensionsJSON = apiextensionsv1.JSON

func raw(s string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(s)} }

type clusterForTest struct{ events.Cluster }

// newMetricsRegistryForTest registers the service's metrics with one sample each, so the linter
// sees every family.
func newMetricsRegistryForTest() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.intents.WithLabelValues("uninstall", "ClusterGone").Inc()
	m.renders.WithLabelValues("hit").Inc()
	m.renderErrors.Inc()
	m.statusWrites.Inc()
	m.rollouts.WithLabelValues("Halted").Set(1)
	events.NewMetrics(reg, serviceName)
	return reg
}

// testEngine is an engine over st that publishes to pub and logs nowhere (a one-second render
// timeout, a minute of source degradation), for the tests that drive it directly: no NATS, no API
// server.
func testEngine(st store, pub intentPublisher, m *metrics) *engine {
	return newEngine(slog.New(slog.NewTextHandler(io.Discard, nil)), st, pub, newRenderer(nil, time.Second), m, time.Minute)
}

// recordingPublisher keeps the intents the engine publishes, in order.
type recordingPublisher struct{ evs []events.Event }

func (p *recordingPublisher) PublishAll(_ context.Context, evs []events.Event) error {
	p.evs = append(p.evs, evs...)
	return nil
}

// installs returns the install intents published so far.
func (p *recordingPublisher) installs() []*events.InstallIntent {
	var out []*events.InstallIntent
	for _, ev := range p.evs {
		if in, ok := ev.(*events.InstallIntent); ok {
			out = append(out, in)
		}
	}
	return out
}
