package eks

import (
	"context"
	"fmt"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks/eksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

// BenchmarkSteadyList measures a steady scan of 1000 unchanged ACTIVE clusters in one region:
// ten ListClusters pages and no DescribeCluster, against the local fake.
func BenchmarkSteadyList(b *testing.B) {
	f := eksfake.New(b)
	for i := range 1000 {
		f.Add("eu-west-1", fmt.Sprintf("c%04d", i), "ACTIVE", map[string]string{"env": "prod"})
	}
	l, _, _ := newTestLister(f, []string{"eu-west-1"}, nil)
	if _, err := l.List(context.Background()); err != nil {
		b.Fatal(err)
	}
	f.ResetCounts()
	b.ResetTimer()
	for range b.N {
		if _, err := l.List(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if d := f.Count("DescribeCluster"); d != 0 {
		b.Fatalf("%d DescribeCluster calls in steady scans", d)
	}
	b.ReportMetric(float64(f.Count("ListClusters"))/float64(b.N), "ListClusters/scan")
}

// BenchmarkScanHeld10k scans 10,000 unchanged ACTIVE clusters of one region through the scanner
// and reports the live heap the scan holds above what is kept between scans (the inventory,
// the describe cache), per cluster (scannertest.ScanHeld). "pages" hands the scanner each
// ListClusters page (ListPages); "whole listing" lists everything first (List).
func BenchmarkScanHeld10k(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"pages", "whole listing"} {
		b.Run(mode, func(b *testing.B) {
			f := eksfake.New(b)
			for i := range n {
				f.Add("eu-west-1", fmt.Sprintf("c%05d", i), "ACTIVE", map[string]string{"env": "prod"})
			}
			l, _, _ := newTestLister(f, []string{"eu-west-1"}, nil)
			src := scanner.Source{Ref: events.SourceRef{Kind: events.SourceKindEKS, ID: "bench"}, Lister: l}
			if mode == "whole listing" {
				src.Lister = scanner.ListerFunc(l.List)
			}
			scannertest.ScanHeld(b, src, n)
		})
	}
}
