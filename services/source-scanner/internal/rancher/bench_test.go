package rancher_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
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
