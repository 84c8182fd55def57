// Package scannertest holds what the tests of the scanner and of its listers share: a settable
// clock, a listing that must succeed, and the check that a degraded listing removes nothing,
// run by the real scanner over a real NATS server.
package scannertest

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// Clock is a settable clock for scanner.Config.Now and the listers' Now option: tests move it
// instead of sleeping through grace periods. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock standing at 2026-01-01 00:00 UTC.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock forward by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// ListOK lists l with a 10 s timeout and fails the test if the listing fails.
func ListOK(t testing.TB, l scanner.Lister) []events.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clusters, err := l.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return clusters
}

// Bus is a real NATS server with Enforcement's topology: the inventory bucket the scanners of
// CheckDegradedRemovesNothing write and the stream they publish to.
type Bus struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream *eventstest.Reader
}

// NewBus starts a NATS server for the test and applies the topology.
func NewBus(t *testing.T) *Bus {
	t.Helper()
	_, js := eventstest.Bus(t, testenv.StartNATS(t).URL())
	kv, err := js.KeyValue(context.Background(), events.BucketInventory)
	if err != nil {
		t.Fatalf("open bucket %s: %v", events.BucketInventory, err)
	}
	return &Bus{js: js, kv: kv, stream: eventstest.NewReader(t, js)}
}

// Fault is one case of CheckDegradedRemovesNothing for a fake cloud API of type F: what goes
// wrong with it, and the degraded reason the scans must give.
type Fault[F any] struct {
	Name       string
	Apply      func(f F)
	WantReason string
}

// CheckDegradedRemovesNothing runs a new scanner (grace period one minute, listing timeout
// 500 ms, clock clk) over src, whose lister lists three clusters: a first complete scan
// announces them; then, with fault applied, two scans past the grace period each are degraded
// with wantReason and remove nothing, and the stream holds a SourceDegraded event with that
// reason, a message and the three known clusters but no ClusterGone; once heal has removed the
// fault, the next scan is complete and still removes nothing. Every source of a Bus needs its
// own id.
func (b *Bus) CheckDegradedRemovesNothing(t *testing.T, src scanner.Source, clk *Clock, fault, heal func(), wantReason string) {
	t.Helper()
	ctx := context.Background()
	sc := scanner.New(b.kv, events.NewPublisher(b.js, "/enforcement/source-scanner"), scanner.Config{
		GracePeriod: time.Minute, ListTimeout: 500 * time.Millisecond, Now: clk.Now,
	}, scanner.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))

	res, err := sc.ScanOnce(ctx, src)
	if err != nil || !res.Complete || res.Appeared != 3 {
		t.Fatalf("first scan = %+v, %v", res, err)
	}
	b.stream.New(t)

	fault()
	for range 2 {
		clk.Add(2 * time.Minute) // past the grace period
		res, err := sc.ScanOnce(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		if res.Complete || res.Reason != wantReason || res.Gone != 0 {
			t.Fatalf("degraded scan = %+v, want reason %s and nothing gone", res, wantReason)
		}
	}
	var sawDegraded bool
	for _, e := range b.stream.New(t) {
		switch e := e.(type) {
		case *events.ClusterGone:
			t.Fatalf("a cluster was announced gone during a degraded listing: %+v", e)
		case *events.SourceDegraded:
			sawDegraded = true
			if e.Reason != wantReason || e.Message == "" || e.Known != 3 {
				t.Errorf("SourceDegraded = %+v", e)
			}
			t.Logf("SourceDegraded %s: %s", e.Reason, e.Message)
		}
	}
	if !sawDegraded {
		t.Fatal("no SourceDegraded event")
	}

	heal()
	clk.Add(2 * time.Minute)
	res, err = sc.ScanOnce(ctx, src)
	if err != nil || !res.Complete || res.Gone != 0 || res.Known != 3 {
		t.Fatalf("scan after recovery = %+v, %v", res, err)
	}
}

// Scanner returns a new scanner over the bus's inventory (grace period one minute, clock clk),
// as a new process starts: it knows only what the bucket holds.
func (b *Bus) Scanner(clk *Clock) *scanner.Scanner {
	return scanner.New(b.kv, events.NewPublisher(b.js, "/enforcement/source-scanner"), scanner.Config{
		GracePeriod: time.Minute, Now: clk.Now,
	}, scanner.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// New returns the events published to the stream since the last call.
func (b *Bus) New(t testing.TB) []events.Event {
	t.Helper()
	return b.stream.New(t)
}

// ScanOK scans src with sc and fails the test unless the scan is complete.
func ScanOK(t testing.TB, sc *scanner.Scanner, src scanner.Source) scanner.Result {
	t.Helper()
	res, err := sc.ScanOnce(context.Background(), src)
	if err != nil || !res.Complete {
		t.Fatalf("scan of %s = %+v, %v; want a complete scan", src.Ref.ID, res, err)
	}
	return res
}

// Identified lists what l lists with each cluster's Identity set to prefix+Key, as the service
// stamps the identity of EKS ("eks:") and GKE ("gke:") clusters.
func Identified(l scanner.Lister, prefix string) scanner.Lister {
	return scanner.ListerFunc(func(ctx context.Context) ([]events.Cluster, error) {
		clusters, err := l.List(ctx)
		for i := range clusters {
			clusters[i].Identity = prefix + clusters[i].Key
		}
		return clusters, err
	})
}

// LegacyNamed lists what l lists under the names versions before 64-bit name suffixes gave the
// clusters (legacy, the lister's LegacyName; its `name` attribute too), so that a scan through
// it leaves the inventory such a version wrote.
func LegacyNamed(l scanner.Lister, legacy func(events.Cluster) string) scanner.Lister {
	return scanner.ListerFunc(func(ctx context.Context) ([]events.Cluster, error) {
		clusters, err := l.List(ctx)
		for i := range clusters {
			c := &clusters[i]
			if name := legacy(*c); name != "" {
				c.Name = name
				c.Attributes = maps.Clone(c.Attributes)
				c.Attributes["name"] = name
			}
		}
		return clusters, err
	})
}

// Names returns the names of the clusters that the appeared and updated events among evs
// announce, by cluster key, and fails the test if one key is announced under two names.
func Names(t testing.TB, evs []events.Event) map[string]string {
	t.Helper()
	names := map[string]string{}
	for _, e := range evs {
		var c events.Cluster
		switch e := e.(type) {
		case *events.ClusterAppeared:
			c = e.Cluster
		case *events.ClusterUpdated:
			c = e.Cluster
		default:
			continue
		}
		if prev, ok := names[c.Key]; ok && prev != c.Name {
			t.Fatalf("cluster %s announced as %s and as %s", c.Key, prev, c.Name)
		}
		names[c.Key] = c.Name
		if n, _ := c.Attributes["name"].(string); n != c.Name {
			t.Errorf("cluster %s: name %s, attribute name %q", c.Key, c.Name, n)
		}
	}
	return names
}
