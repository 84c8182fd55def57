package rancher_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// BenchmarkList10k lists 10,000 Rancher cluster objects over TLS in pages of 1,000 and converts
// them (decode, volatile fields, credential scrub). The fake server runs in the same process, so
// time and memory include its JSON encoding.
func BenchmarkList10k(b *testing.B) {
	srv := rancherfake.New(b, "tok-bench", 1000)
	clusters := make([]map[string]any, 10000)
	for i := range clusters {
		clusters[i] = rancherfake.Cluster(fmt.Sprintf("c-%05d", i), fmt.Sprintf("cluster-%05d", i), "active", map[string]string{"env": "prod"})
	}
	srv.SetClusters(clusters...)
	l := benchLister(b, srv)
	b.ReportAllocs()
	start, n := testenv.CPUTime(), 0
	for b.Loop() {
		n++
		got, err := l.List(context.Background())
		if err != nil || len(got) != 10000 {
			b.Fatalf("listed %d: %v", len(got), err)
		}
	}
	testenv.ReportCPU(b, start, n)
}

// BenchmarkScanHeld10k scans an unchanged 10,000-cluster Rancher in pages of 100 through the
// scanner, the way source-scanner does every SCAN_INTERVAL, and reports as held-B/cluster the
// live heap the scan holds above the inventory, at its peak: sampled after a full collection
// when each page is requested. "pages" hands the scanner one page at a time (the lister's
// ListPages); "whole listing" lists everything first (List), what the scanner did before.
func BenchmarkScanHeld10k(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"pages", "whole listing"} {
		b.Run(mode, func(b *testing.B) {
			h := rancherfake.NewHandler("tok-bench", 100)
			var sampling atomic.Bool
			var peak atomic.Int64
			ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if sampling.Load() {
					if live := testenv.LiveHeap(); live > peak.Load() {
						peak.Store(live)
					}
				}
				h.ServeHTTP(w, r)
			}))
			b.Cleanup(ts.Close)
			srv := &rancherfake.Server{Server: ts, Handler: h}
			fleet := make([]map[string]any, n)
			for i := range fleet {
				fleet[i] = rancherfake.Cluster(fmt.Sprintf("c-%05d", i), fmt.Sprintf("cluster-%05d", i), "active", map[string]string{"env": "prod"})
			}
			srv.SetClusters(fleet...)
			l := benchLister(b, srv)
			src := scanner.Source{Ref: events.SourceRef{Kind: events.SourceKindRancher, ID: "bench"}, Lister: l}
			if mode == "whole listing" {
				src.Lister = scanner.ListerFunc(l.List)
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
				held = append(held, float64(peak.Load()-base)/n)
			}
			slices.Sort(held)
			b.ReportMetric(held[len(held)/2], "held-B/cluster")
		})
	}
}
