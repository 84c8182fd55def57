// Package scannertest holds what the tests of the scanner and of its listers share: a settable
// clock, a listing that must succeed, and the check that a degraded listing removes nothing,
// run by the real scanner over a real NATS server.
package scannertest

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
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

// ScanHeld scans src, whose lister lists n clusters that do not change, through a scanner over
// a real NATS server, the way source-scanner does every SCAN_INTERVAL, and reports as
// held-B/cluster the median, over b's loop, of the live heap a scan holds above what is kept
// between scans, at its peak. The heap is sampled after a full collection as each page reaches
// the scanner: for a lister that does not page (or one wrapped in scanner.ListerFunc), once,
// when the whole listing does. The first scan, which announces the clusters, is not measured.
func ScanHeld(b *testing.B, src scanner.Source, n int) {
	var sampling atomic.Bool
	var peak atomic.Int64
	sample := func() {
		if !sampling.Load() {
			return
		}
		if live := testenv.LiveHeap(); live > peak.Load() {
			peak.Store(live)
		}
	}
	if pl, ok := src.Lister.(scanner.PagedLister); ok {
		src.Lister = sampledPages{pl, sample}
	} else {
		l := src.Lister
		src.Lister = scanner.ListerFunc(func(ctx context.Context) ([]events.Cluster, error) {
			clusters, err := l.List(ctx)
			sample()
			return clusters, err
		})
	}
	_, js := eventstest.Bus(b, testenv.StartNATS(b).URL())
	kv, err := js.KeyValue(context.Background(), events.BucketInventory)
	if err != nil {
		b.Fatal(err)
	}
	sc := scanner.New(kv, events.NewPublisher(js, "/bench"), scanner.Config{},
		scanner.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if res, err := sc.ScanOnce(context.Background(), src); err != nil || res.Appeared != n {
		b.Fatalf("first scan: %+v %v", res, err)
	}
	var held []float64
	for b.Loop() {
		base := testenv.LiveHeap()
		peak.Store(base)
		sampling.Store(true)
		res, err := sc.ScanOnce(context.Background(), src)
		sampling.Store(false)
		if err != nil || !res.Complete || res.Appeared+res.Updated+res.Gone != 0 {
			b.Fatalf("steady scan: %+v %v", res, err)
		}
		held = append(held, float64(peak.Load()-base)/float64(n))
	}
	slices.Sort(held)
	b.ReportMetric(held[len(held)/2], "held-B/cluster")
}

// sampledPages samples the heap as each page of its lister reaches the scanner.
type sampledPages struct {
	scanner.PagedLister
	sample func()
}

func (l sampledPages) ListPages(ctx context.Context, each func([]events.Cluster) error) error {
	return l.PagedLister.ListPages(ctx, func(page []events.Cluster) error {
		l.sample()
		return each(page)
	})
}
