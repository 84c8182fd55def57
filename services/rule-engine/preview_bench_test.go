package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/compat"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
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

// BenchmarkPreviewSchema measures what the CRD's schema adds to a preview (schema.go), on the
// README's dynamic rule manifest: "typed" is the strict typed decoding a preview did before,
// "parse" the whole of parseRule now (YAML to JSON, decoding, schema, typed decoding), "schema"
// the schema step alone (unknown fields, defaults, OpenAPI and CEL validation) on a fresh copy of
// the decoded manifest (the copy is counted).
func BenchmarkPreviewSchema(b *testing.B) {
	ctx := context.Background()
	manifest := compat.Manifest(b, examples+"readme-02-dynamic-rule-jinja.yaml")
	manifest = bytes.Replace(manifest, []byte("metadata:\n"), []byte("metadata:\n  namespace: enforcement\n"), 1) // as kubectl -n would
	rs, err := clusterRuleSchema()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := parseRule(ctx, rs, manifest); err != nil {
		b.Fatal(err)
	}
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var cr v1beta1.ClusterRule
			if err := yaml.UnmarshalStrict(manifest, &cr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := parseRule(ctx, rs, manifest); err != nil {
				b.Fatal(err)
			}
		}
	})
	js, err := yaml.YAMLToJSON(manifest)
	if err != nil {
		b.Fatal(err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		b.Fatal(err)
	}
	b.Run("schema", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := rs.admit(ctx, runtime.DeepCopyJSON(obj)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
