package aks

import (
	"context"
	"fmt"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/testenv/aksfake"
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
