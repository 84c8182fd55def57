package eks

import (
	"context"
	"fmt"
	"testing"

	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks/eksfake"
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
