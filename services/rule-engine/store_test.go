package main

import (
	"context"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestKVStore round-trips the state and the render cache through real JetStream KV buckets.
func TestKVStore(t *testing.T) {
	n := testenv.StartNATS(t)
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	st, err := openKVStore(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	cid := clusterID("src", "arn:aws:eks:us-east-1:1:cluster/a b")
	rec := &clusterRecord{Cluster: testCluster("a", nil, true), Revision: 4}
	if err := st.putCluster(ctx, cid, rec); err != nil {
		t.Fatal(err)
	}
	p := &pairState{Rule: events.RuleRef{Namespace: "ns", Name: "r"}, RenderKey: "k", Enforcements: map[string]*enfState{"g": {SpecHash: "h", Installed: true}}}
	if err := st.putPair(ctx, "ns/r", cid, p); err != nil {
		t.Fatal(err)
	}
	if err := st.putPair(ctx, "ns/gone", cid, p); err != nil {
		t.Fatal(err)
	}
	if err := st.deletePair(ctx, "ns/gone", cid); err != nil {
		t.Fatal(err)
	}
	clusters, pairs, err := st.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 1 || clusters[cid].Revision != 4 || len(pairs) != 1 || !pairs["ns/r"][cid].Enforcements["g"].Installed {
		t.Errorf("load: clusters %v, pairs %v", clusters, pairs)
	}

	for _, key := range []string{"u1.1.aaaa", "u1.2.aaaa", "u2.1.aaaa"} {
		if err := st.putRender(ctx, key, []events.Enforcement{{Name: key}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.purgeRenders(ctx, "u1", 2); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"u1.1.aaaa": false, "u1.2.aaaa": true, "u2.1.aaaa": true} {
		got, ok, err := st.getRender(ctx, key)
		if err != nil || ok != want || (ok && got[0].Name != key) {
			t.Errorf("render %s: %v %v %v, want present=%v", key, got, ok, err, want)
		}
	}
}
