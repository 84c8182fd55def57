package gke

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke/gkefake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestScannerDegradedRemovesNothing drives the real scanner (embedded JetStream) with a GKE
// Lister: after a complete scan, each fault makes scans degraded with a clear reason in a
// SourceDegraded event, and no cluster is gone even after the grace period; when the fault
// clears, the next scan is complete and still removes nothing.
func TestScannerDegradedRemovesNothing(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := eventstest.Bus(t, srv.URL())
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, events.BucketInventory)
	if err != nil {
		t.Fatal(err)
	}
	stream := eventstest.NewReader(t, js)
	published := func() []events.Event { t.Helper(); return stream.New(t) }
	gone := (&events.ClusterGone{}).Type()
	degraded := (&events.SourceDegraded{}).Type()

	tests := []struct {
		name       string
		fault      func(f *gkefake.Server)
		wantReason string
	}{
		{"permission denied", func(f *gkefake.Server) {
			f.Fail["proj-a"] = gkefake.Error{Code: 403, Status: "PERMISSION_DENIED", Msg: "Required 'container.clusters.list' permission for 'projects/proj-a'."}
		}, events.DegradedUnauthorized},
		// proj-b still answers, so the listing is partial.
		{"throttled beyond the retries", func(f *gkefake.Server) {
			f.Fail["proj-a"] = gkefake.Error{Code: 429, Status: "RESOURCE_EXHAUSTED", Msg: "Quota exceeded."}
		}, events.DegradedPartial},
		{"5xx in one project of two", func(f *gkefake.Server) {
			f.Fail["proj-b"] = gkefake.Error{Code: 502, Status: "UNAVAILABLE", Msg: "Bad gateway."}
		}, events.DegradedPartial},
		{"missing zones", func(f *gkefake.Server) { f.Missing["proj-a"] = []string{"europe-west1-b"} }, events.DegradedPartial},
		{"timeout", func(f *gkefake.Server) { f.Delay = 3 * time.Second }, events.DegradedListFailed},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := gkefake.New(t)
			f.Add("proj-a", "europe-west1", "a", "RUNNING", nil)
			f.Add("proj-a", "europe-west1-b", "b", "RUNNING", nil)
			f.Add("proj-b", "us-central1", "c", "PROVISIONING", nil)
			l, _ := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-a", "proj-b"} })
			clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			sc := scanner.New(kv, events.NewPublisher(js, "/enforcement/source-scanner"), scanner.Config{
				GracePeriod: time.Minute, ListTimeout: 500 * time.Millisecond, Now: clk.Now,
			}, scanner.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
			ref := events.SourceRef{Kind: events.SourceKindGKE, SecretNamespace: "enforcement", SecretName: "gke-" + string(rune('a'+i))}
			ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, events.GKESourceFilters([]string{"proj-a", "proj-b"}, nil))
			src := scanner.Source{Ref: ref, Lister: l}

			res, err := sc.ScanOnce(ctx, src)
			if err != nil || !res.Complete || res.Appeared != 3 {
				t.Fatalf("first scan = %+v, %v", res, err)
			}
			published()

			f.Configure(tt.fault)
			for range 2 {
				clk.Add(2 * time.Minute) // past the grace period
				res, err := sc.ScanOnce(ctx, src)
				if err != nil {
					t.Fatal(err)
				}
				if res.Complete || res.Reason != tt.wantReason || res.Gone != 0 {
					t.Fatalf("degraded scan = %+v, want reason %s and nothing gone", res, tt.wantReason)
				}
			}
			var sawDegraded bool
			for _, e := range published() {
				switch e.Type() {
				case gone:
					t.Fatalf("a cluster was announced gone during a degraded listing: %+v", e)
				case degraded:
					d := e.(*events.SourceDegraded)
					sawDegraded = true
					if d.Reason != tt.wantReason || d.Message == "" || d.Known != 3 {
						t.Errorf("SourceDegraded = %+v", d)
					}
					t.Logf("SourceDegraded %s: %s", d.Reason, d.Message)
				}
			}
			if !sawDegraded {
				t.Fatal("no SourceDegraded event")
			}

			f.Configure(func(f *gkefake.Server) {
				f.Fail, f.Missing, f.Delay = map[string]gkefake.Error{}, map[string][]string{}, 0
			})
			clk.Add(2 * time.Minute)
			res, err = sc.ScanOnce(ctx, src)
			if err != nil || !res.Complete || res.Gone != 0 || res.Known != 3 {
				t.Fatalf("scan after recovery = %+v, %v", res, err)
			}
		})
	}
}
