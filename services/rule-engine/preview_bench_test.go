package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkPreview measures one preview of an edit of the README's dynamic rule on a real NATS
// state bucket holding 5,000 clusters and the rule's 1,000 install records (it selects one team
// in five): the bucket read, the renders of the new generation for its 1,000 clusters (nothing
// cached: the edit is a new generation) and the decision. The engine that wrote the bucket is
// the real one, on the real kvStore.
func BenchmarkPreview(b *testing.B) {
	ctx := context.Background()
	n := testenv.StartNATS(b)
	_, js := eventstest.Bus(b, n.URL())
	st, err := openKVStore(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	e := testEngine(st, &countingPublisher{}, newMetrics(nil))
	src := rancherSource()
	for i := range 5000 {
		c := events.Cluster{Source: src, Key: fmt.Sprintf("c-%05d", i), Name: fmt.Sprintf("cluster-%05d", i),
			URL: fmt.Sprintf("https://rancher.example/k8s/clusters/c-%05d", i), State: "active", Eligible: true,
			Labels:     map[string]string{"team": fmt.Sprintf("t%d", i%5)},
			Attributes: map[string]any{"id": fmt.Sprintf("c-%05d", i), "driver": "gke"}}
		if err := e.applyCluster(ctx, c, uint64(i+1), 0); err != nil {
			b.Fatal(err)
		}
	}
	live := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "fleet", UID: types.UID("uid-fleet"), Generation: 1}}
	live.Spec.Source = v1beta1.Source{Rancher: &v1beta1.RancherSource{Labels: map[string]string{"team": "t0"}}}
	live.Spec.Enforcements = loadExampleRule(b, "readme-02-dynamic-rule-jinja.yaml").Spec.Enforcements
	if err := e.applyRule(ctx, ruleFromSpec(live, "enforcement")); err != nil {
		b.Fatal(err)
	}
	p := &previewer{store: st, renderer: e.renderer, degradedTTL: time.Minute, maxRemovalFraction: 0.1, operatorNamespace: "enforcement"}
	edit := live.DeepCopy()
	edit.Spec.Enforcements[0].Path = "edited"
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := p.previewRule(ctx, edit.DeepCopy(), live)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Changes) != 1000 {
			b.Fatalf("%d changes, want 1000", len(res.Changes))
		}
	}
}
