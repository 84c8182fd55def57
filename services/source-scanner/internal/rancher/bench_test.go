package rancher_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
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
// live heap the scan holds above the inventory, at its peak (scannertest.ScanHeld). "pages"
// hands the scanner one page at a time (the lister's ListPages); "whole listing" lists
// everything first (List), what the scanner did before.
func BenchmarkScanHeld10k(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"pages", "whole listing"} {
		b.Run(mode, func(b *testing.B) {
			srv := rancherfake.New(b, "tok-bench", 100)
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
			scannertest.ScanHeld(b, src, n)
		})
	}
}
