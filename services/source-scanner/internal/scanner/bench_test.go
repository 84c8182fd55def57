package scanner

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// benchCluster is a cluster with attributes the size of a real Rancher object's stable fields.
func benchCluster(i int, env string) events.Cluster {
	key := fmt.Sprintf("c-%05d", i)
	return events.Cluster{
		Source: events.SourceRef{Kind: "rancher", ID: "0123456789abcdef"},
		Key:    key, Name: "cluster-" + key, URL: "https://rancher.example/k8s/clusters/" + key,
		Labels: map[string]string{"env": env, "team": "t" + fmt.Sprint(i%50), "region": "br-" + fmt.Sprint(i%4)},
		State:  "active", Eligible: true,
		Attributes: map[string]any{
			"id": key, "name": "cluster-" + key, "state": "active", "type": "cluster", "baseType": "cluster",
			"driver": "imported", "provider": "rke", "internal": false, "nodeCount": float64(3),
			"created": "2021-03-01T12:00:00Z", "createdTS": float64(1614600000000), "creatorId": "user-abcde",
			"description": "", "uuid": "uuid-" + key, "dockerRootDir": "/var/lib/docker",
			"labels":      map[string]any{"env": env, "team": "t" + fmt.Sprint(i%50)},
			"annotations": map[string]any{"authz.management.cattle.io/creator-role-bindings": "{}"},
			"version":     map[string]any{"gitVersion": "v1.24.17", "major": "1", "minor": "24"},
			"links":       map[string]any{"self": "https://rancher.example/v3/clusters/" + key},
		},
	}
}

// BenchmarkDiff10k measures one scan diff of a 10,000-cluster source against its inventory
// (1% relabelled, 1% new, 1% missing): the CPU time and memory a scan spends besides I/O.
func BenchmarkDiff10k(b *testing.B) {
	const n = 10000
	known := make(map[string]*record, n)
	for i := range n {
		c := benchCluster(i, "prod")
		known[c.Key] = &record{Cluster: c, rev: uint64(i + 1), attrHash: hashAttributes(c.Attributes)}
		known[c.Key].makeSlim()
	}
	listing := make([]events.Cluster, 0, n)
	for i := 100; i < n+100; i++ {
		env := "prod"
		if i%100 == 0 {
			env = "staging"
		}
		listing = append(listing, benchCluster(i, env))
	}
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	start, iters := testenv.CPUTime(), 0
	for b.Loop() {
		iters++
		p, err := diff(known, listing, now, 10*time.Minute)
		if err != nil || len(p.Appeared) != 100 || len(p.Missing) != 100 || len(p.Updated) != 99 {
			b.Fatalf("plan: %d appeared, %d missing, %d updated, %v", len(p.Appeared), len(p.Missing), len(p.Updated), err)
		}
		_ = decideRemovals(known, p.Due, nil, 0.1)
	}
	testenv.ReportCPU(b, start, iters)
}

// BenchmarkInventoryMemory10k reports the heap the in-memory inventory of a 10,000-cluster
// source holds between scans (records are slim: attributes live in the KV bucket only), as the
// metric inventory-MB.
func BenchmarkInventoryMemory10k(b *testing.B) {
	for b.Loop() {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		known := make(map[string]*record, 10000)
		for i := range 10000 {
			c := benchCluster(i, "prod")
			r := &record{Cluster: c, attrHash: hashAttributes(c.Attributes)}
			r.makeSlim()
			known[c.Key] = r
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/1e6, "inventory-MB")
		runtime.KeepAlive(known)
	}
}
