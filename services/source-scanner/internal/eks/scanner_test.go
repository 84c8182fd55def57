package eks

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks/eksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// TestScannerDegradedRemovesNothing drives the real scanner (embedded JetStream) with an EKS
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
		fault      func(f *eksfake.Server)
		wantReason string
	}{
		{"access denied", func(f *eksfake.Server) {
			f.Fail["ListClusters"] = eksfake.Error{Status: 403, ErrType: "AccessDeniedException", Message: "not authorized to perform: eks:ListClusters"}
		}, events.DegradedUnauthorized},
		{"throttled beyond the retries", func(f *eksfake.Server) { f.Throttle["ListClusters"] = 1000 }, events.DegradedListFailed},
		{"one region fails", func(f *eksfake.Server) {
			f.Fail["ListClusters"] = eksfake.Error{Status: 500, ErrType: "ServerException", Message: "internal", Region: "us-east-1"}
		}, events.DegradedPartial},
		// Only the CREATING cluster (us-east-1) is described again, so one region of two fails.
		{"5xx on describe", func(f *eksfake.Server) {
			f.Fail["DescribeCluster"] = eksfake.Error{Status: 500, ErrType: "ServerException", Message: "internal"}
		}, events.DegradedPartial},
		{"timeout", func(f *eksfake.Server) { f.Delay = 3 * time.Second }, events.DegradedListFailed},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := eksfake.New(t)
			f.Add("eu-west-1", "a", "ACTIVE", nil)
			f.Add("eu-west-1", "b", "ACTIVE", nil)
			f.Add("us-east-1", "c", "CREATING", nil)
			l, _, clk := newTestLister(f, []string{"eu-west-1", "us-east-1"}, nil)
			sc := scanner.New(kv, events.NewPublisher(js, "/enforcement/source-scanner"), scanner.Config{
				GracePeriod: time.Minute, ListTimeout: 500 * time.Millisecond, Now: clk.Now,
			}, scanner.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
			ref := events.SourceRef{Kind: events.SourceKindEKS, SecretNamespace: "enforcement", SecretName: "eks-" + string(rune('a'+i))}
			ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, events.EKSSourceFilters([]string{"eu-west-1", "us-east-1"}))
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

			f.Configure(func(f *eksfake.Server) {
				f.Fail, f.Throttle, f.Delay = map[string]eksfake.Error{}, map[string]int{}, 0
			})
			clk.Add(2 * time.Minute)
			res, err = sc.ScanOnce(ctx, src)
			if err != nil || !res.Complete || res.Gone != 0 || res.Known != 3 {
				t.Fatalf("scan after recovery = %+v, %v", res, err)
			}
		})
	}
}
