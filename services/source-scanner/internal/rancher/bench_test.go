package rancher_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

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
	start, n := cpuTime(), 0
	for b.Loop() {
		n++
		got, err := l.List(context.Background())
		if err != nil || len(got) != 10000 {
			b.Fatalf("listed %d: %v", len(got), err)
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(time.Millisecond)/float64(n), "cpu-ms/op")
}

// cpuTime is the process's user+system CPU time (wall time on a shared machine mostly measures
// the neighbours).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
