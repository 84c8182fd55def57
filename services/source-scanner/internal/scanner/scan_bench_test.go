package scanner_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// benchListing is a 10,000-cluster listing with Rancher-sized stable attributes.
func benchListing(n int) []events.Cluster {
	out := make([]events.Cluster, n)
	for i := range out {
		key := fmt.Sprintf("c-%05d", i)
		out[i] = events.Cluster{
			Key: key, Name: "cluster-" + key, URL: "https://rancher.example/k8s/clusters/" + key,
			Labels: map[string]string{"env": "prod", "team": fmt.Sprint("t", i%50)},
			State:  "active", Eligible: true,
			Attributes: map[string]any{"id": key, "name": "cluster-" + key, "state": "active", "provider": "rke",
				"driver": "imported", "nodeCount": float64(3), "created": "2021-03-01T12:00:00Z",
				"labels":  map[string]any{"env": "prod"},
				"version": map[string]any{"gitVersion": "v1.24.17"}},
		}
	}
	return out
}

func benchScanner(b *testing.B) *scanner.Scanner {
	b.Helper()
	_, js := eventstest.Bus(b, testenv.StartNATS(b).URL())
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, events.BucketInventory)
	if err != nil {
		b.Fatal(err)
	}
	return scanner.New(kv, events.NewPublisher(js, "/bench"), scanner.Config{},
		scanner.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func benchSource(id string, listing []events.Cluster) scanner.Source {
	return scanner.Source{
		Ref:    events.SourceRef{Kind: "rancher", ID: id},
		Lister: scanner.ListerFunc(func(context.Context) ([]events.Cluster, error) { return listing, nil }),
	}
}

// BenchmarkScanOnceSteady10k is one whole scan of an unchanged 10,000-cluster source on embedded
// NATS: the scan counter and watermark writes plus the diff. This is what every SCAN_INTERVAL
// costs in the steady state (listing I/O excluded).
func BenchmarkScanOnceSteady10k(b *testing.B) {
	sc := benchScanner(b)
	src := benchSource("steady", benchListing(10000))
	if res, err := sc.ScanOnce(context.Background(), src); err != nil || res.Appeared != 10000 {
		b.Fatalf("first scan: %+v %v", res, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start, n := testenv.CPUTime(), 0
	for b.Loop() {
		n++
		res, err := sc.ScanOnce(context.Background(), src)
		if err != nil || res.Appeared+res.Updated != 0 {
			b.Fatalf("steady scan: %+v %v", res, err)
		}
	}
	testenv.ReportCPU(b, start, n)
}

// BenchmarkScanOnceFirst10k is the first scan of a 10,000-cluster source: 10,000 inventory
// writes and 10,000 cluster appeared events acknowledged by the stream.
func BenchmarkScanOnceFirst10k(b *testing.B) {
	sc := benchScanner(b)
	listing := benchListing(10000)
	b.ReportAllocs()
	b.ResetTimer()
	start, i := testenv.CPUTime(), 0
	for b.Loop() {
		i++
		res, err := sc.ScanOnce(context.Background(), benchSource(fmt.Sprint("first", i), listing))
		if err != nil || res.Appeared != 10000 {
			b.Fatalf("first scan: %+v %v", res, err)
		}
	}
	testenv.ReportCPU(b, start, i)
}

// BenchmarkScanOnceFirst10kLegacyNames is BenchmarkScanOnceFirst10k for a source whose 10,000
// clusters all have normalised names (Source.LegacyName differs from the listed name) and are
// all known to another source under their legacy names: a handover of a whole fleet named by a
// version before 64-bit suffixes, the most the name lookup (names.go) ever reads.
func BenchmarkScanOnceFirst10kLegacyNames(b *testing.B) {
	sc := benchScanner(b)
	listing := benchListing(10000)
	legacy := func(c events.Cluster) string { return "legacy-" + c.Key }
	older := slices.Clone(listing)
	for i := range older {
		older[i].Identity = "bench:" + older[i].Key
		older[i].Name = legacy(older[i])
		listing[i].Identity = older[i].Identity
	}
	if res, err := sc.ScanOnce(context.Background(), benchSource("older", older)); err != nil || res.Appeared != 10000 {
		b.Fatalf("older source's scan: %+v %v", res, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start, i := testenv.CPUTime(), 0
	for b.Loop() {
		i++
		src := benchSource(fmt.Sprint("handover", i), slices.Clone(listing))
		src.LegacyName = legacy
		res, err := sc.ScanOnce(context.Background(), src)
		if err != nil || res.Appeared != 10000 {
			b.Fatalf("first scan: %+v %v", res, err)
		}
	}
	testenv.ReportCPU(b, start, i)
}
