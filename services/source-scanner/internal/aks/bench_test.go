package aks

import (
	"context"
	"fmt"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv/aksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

// BenchmarkSteadyList measures one steady scan of a subscription with 1000 clusters, 100 per
// page as ARM pages them (10 list calls, decoding and conversion; the CAs were fetched by the
// first scan, before the timer) against the local fake over TLS.
func BenchmarkSteadyList(b *testing.B) {
	f := aksfake.New(b)
	f.PageSize = 100
	for i := range 1000 {
		f.Add(subA, "rg", fmt.Sprintf("c%04d", i), "Succeeded", "Running", map[string]string{"env": "prod"})
	}
	l, _ := newTestLister(b, f, Options{Subscriptions: []string{subA}}, secretCreds)
	if c, err := l.List(context.Background()); err != nil || len(c) != 1000 {
		b.Fatalf("first scan: %d clusters, %v", len(c), err)
	}
	b.ResetTimer()
	for range b.N {
		c, err := l.List(context.Background())
		if err != nil || len(c) != 1000 {
			b.Fatalf("%d clusters, %v", len(c), err)
		}
	}
	b.StopTimer()
	if n := f.Creds["c0000"]; n != 1 {
		b.Fatalf("CA of c0000 fetched %d times, want 1", n)
	}
}

// BenchmarkScanHeld10k scans a subscription of 10,000 unchanged clusters, 100 a page, through
// the scanner and reports the live heap the scan holds above what is kept between scans (the
// inventory, the CAs), per cluster (scannertest.ScanHeld). "pages" hands the scanner each ARM
// page (ListPages); "whole listing" lists everything first (List).
func BenchmarkScanHeld10k(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"pages", "whole listing"} {
		b.Run(mode, func(b *testing.B) {
			f := aksfake.New(b)
			f.PageSize = 100
			for i := range n {
				f.Add(subA, "rg", fmt.Sprintf("c%05d", i), "Succeeded", "Running", map[string]string{"env": "prod"})
			}
			l, _ := newTestLister(b, f, Options{Subscriptions: []string{subA}}, secretCreds)
			src := scanner.Source{Ref: events.SourceRef{Kind: events.SourceKindAKS, ID: "bench"}, Lister: l}
			if mode == "whole listing" {
				src.Lister = scanner.ListerFunc(l.List)
			}
			scannertest.ScanHeld(b, src, n)
		})
	}
}
