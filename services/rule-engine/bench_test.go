package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// countingPublisher counts intents instead of sending them: the benchmark measures matching and
// rendering, not NATS round trips.
type countingPublisher struct{ n int }

func (p *countingPublisher) PublishAll(_ context.Context, evs []events.Event) error {
	p.n += len(evs)
	return nil
}

// benchEngine builds 100 rules over one source of 10,000 clusters: 50 select by a team label
// (10% of clusters each), 50 by an env expression (a third); half of each are templated like
// the README's dynamic rule, half literal.
func benchEngine(b *testing.B, rules, clusters int) (*engine, *countingPublisher, []events.Cluster) {
	b.Helper()
	pub := &countingPublisher{}
	e := testEngine(newMemStore(), pub, newMetrics(nil))
	ctx := context.Background()
	src := rancherSource()
	envs := []string{"prod", "stage", "dev"}
	cs := make([]events.Cluster, clusters)
	for i := range cs {
		cs[i] = events.Cluster{Source: src, Key: fmt.Sprintf("c-%05d", i), Name: fmt.Sprintf("cluster-%05d", i),
			URL: fmt.Sprintf("https://rancher.example/k8s/clusters/c-%05d", i), State: "active", Eligible: true,
			Labels:     map[string]string{"team": fmt.Sprintf("t%d", i%10), "env": envs[i%3], "cattle.io/creator": "norman"},
			Attributes: map[string]any{"id": fmt.Sprintf("c-%05d", i), "version": "v1.30", "driver": "gke", "region": "us-east1"}}
		if err := e.applyCluster(ctx, cs[i], uint64(i+1), 0); err != nil {
			b.Fatal(err)
		}
	}
	dynamic := loadExampleRule(b, "readme-02-dynamic-rule-jinja.yaml").Spec.Enforcements
	literal := loadExampleRule(b, "readme-01-dev-rules.yaml").Spec.Enforcements
	for i := range rules {
		cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("rule-%03d", i),
			UID: types.UID(fmt.Sprintf("uid-%03d", i)), Generation: 1}}
		cr.Spec.Source = v1beta1.Source{Rancher: &v1beta1.RancherSource{}}
		if i%2 == 0 {
			cr.Spec.Source.Rancher.Labels = map[string]string{"team": fmt.Sprintf("t%d", i%10), "cattle.io/creator": "norman"}
		} else {
			cr.Spec.Source.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{envs[i%3]}}}
		}
		if i%4 < 2 {
			cr.Spec.Enforcements = dynamic
		} else {
			cr.Spec.Enforcements = literal
		}
		if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
			b.Fatal(err)
		}
	}
	return e, pub, cs
}

// benchWorld is built once per test binary: building 100 rules over 10,000 clusters is the
// expensive part, and the modes below leave it consistent for the next run.
var benchWorld struct {
	e   *engine
	pub *countingPublisher
	cs  []events.Cluster
	rev uint64
	seq int // makes every changed value unique across runs
}

// BenchmarkClusterEvent measures cluster updated events matched against 100 rules over 10,000
// clusters. "changed" changes an attribute templates see, so every matching templated rule
// renders again (and every templated pair gets a new spec only if its output changed: here the
// output does not use the attribute, so no intents follow); "moved" changes the URL, which every
// render and spec uses, so every matching pair renders and emits install intents; "unchanged"
// is a re-sent event with the same variables (the common case of a label-only or state-only
// update), which only matches.
func BenchmarkClusterEvent(b *testing.B) {
	if benchWorld.e == nil {
		benchWorld.e, benchWorld.pub, benchWorld.cs = benchEngine(b, 100, 10000)
		benchWorld.rev = uint64(len(benchWorld.cs))
	}
	e, pub, cs := benchWorld.e, benchWorld.pub, benchWorld.cs
	for _, mode := range []string{"unchanged", "changed", "moved"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			rev := &benchWorld.rev
			pub.n = 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c := cs[i%len(cs)]
				benchWorld.seq++
				switch mode {
				case "changed":
					c.Attributes = map[string]any{"id": c.Key, "version": fmt.Sprintf("v1.%d", benchWorld.seq), "driver": "gke", "region": "us-east1"}
				case "moved":
					c.URL = fmt.Sprintf("https://rancher-%d.example/k8s/clusters/%s", benchWorld.seq, c.Key)
				}
				*rev++
				if err := e.applyCluster(ctx, c, *rev, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(pub.n)/float64(b.N), "intents/event")
		})
	}
}

// BenchmarkRenderDynamicRule renders the README's dynamic rule for one cluster: the cost of one
// cache miss.
func BenchmarkRenderDynamicRule(b *testing.B) {
	compiled := compile(loadExampleRule(b, "readme-02-dynamic-rule-jinja.yaml").Spec.Enforcements)
	r := newRenderer(nil, time.Second)
	c := cluster("cluster1", nil)
	vars := templateVars(&c)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := r.render(context.Background(), compiled, vars); err != nil {
			b.Fatal(err)
		}
	}
}

// persistNothing is a store that keeps no cluster, pair or render in the process, as kvStore
// keeps them in NATS: what a memory figure of the engine should not count.
type persistNothing struct{ *memStore }

func (persistNothing) putCluster(context.Context, string, *clusterRecord) error { return nil }
func (persistNothing) putPair(context.Context, string, string, *pairState) error {
	return nil
}
func (persistNothing) putRender(_ context.Context, _ string, enfs []events.Enforcement) ([]events.Enforcement, error) {
	return enfs, nil
}

// BenchmarkClusterAppeared measures what the engine keeps per cluster and what a new cluster
// costs it, with ten rules of one enforcement each (the pipeline benchmark's), each selecting
// every cluster of a Rancher source. It builds 10,000 clusters with the attributes a Rancher
// server lists and reports their live heap after a collection, above the rules alone, per
// cluster (live-B/cluster), and again once every install succeeded and each pair recorded its
// outcome (live-B/cluster-installed), and once more after Argo CD reported each Application
// healthy (live-B/cluster-healthy); then each iteration is one more cluster appearing, decided
// for the ten rules (ten pairs, ten install intents).
func BenchmarkClusterAppeared(b *testing.B) {
	const clusters, rules = 10000, 10
	e := testEngine(persistNothing{newMemStore()}, &countingPublisher{}, newMetrics(nil))
	ctx := context.Background()
	applyPipelineRules(b, e, rules)
	before := testenv.LiveHeap()
	for i := range clusters {
		if err := e.applyCluster(ctx, rancherCluster(b, i), uint64(i+1), 0); err != nil {
			b.Fatal(err)
		}
	}
	perCluster := float64(testenv.LiveHeap()-before) / clusters
	if n := len(e.pairs) * len(e.pairs["enforcement/pipeline-0"]); n != clusters*rules {
		b.Fatalf("%d pairs, want %d", n, clusters*rules)
	}
	// Then every install succeeds, as argo-syncer reports it, and each state records the outcome.
	succeedInstalls(b, e)
	perClusterInstalled := float64(testenv.LiveHeap()-before) / clusters
	for _, pairs := range e.pairs {
		for _, p := range pairs {
			if st := p.Enforcements[0]; !st.Installed || st.lastOutcomeID() == "" {
				b.Fatalf("pair %s/%s: installed %v, last outcome %q after its install succeeded", p.Rule.Value().Name, p.Cluster.Value().Name, st.Installed, st.lastOutcomeID())
			}
		}
	}
	// Then Argo CD reports each Application healthy and synced, as argo-syncer passes it on: each
	// report decoded from JSON, as an event brings it.
	var reports []*events.ApplicationHealth
	for _, pairs := range e.pairs {
		for _, p := range pairs {
			for _, st := range p.Enforcements {
				js, err := json.Marshal(&events.ApplicationHealth{Rule: p.Rule.Value(), Cluster: p.Cluster.Value().Name,
					Enforcement: st.Name, Application: p.Cluster.Value().Name + "-" + st.Name, SpecHash: st.SpecHash, Observed: true,
					ResourceVersion: "4711", Health: "Healthy", Sync: "Synced", Operation: "Succeeded", Message: "successfully synced (all tasks run)"})
				if err != nil {
					b.Fatal(err)
				}
				var ev events.ApplicationHealth
				if err := json.Unmarshal(js, &ev); err != nil {
					b.Fatal(err)
				}
				reports = append(reports, &ev)
			}
		}
	}
	for i, ev := range reports {
		if err := e.applyHealth(ctx, ev); err != nil {
			b.Fatal(err)
		}
		reports[i] = nil
	}
	perClusterHealthy := float64(testenv.LiveHeap()-before) / clusters
	for _, pairs := range e.pairs {
		for _, p := range pairs {
			if h := p.Enforcements[0].Health; h == nil || h.Status().Health != "Healthy" {
				b.Fatalf("pair %s/%s: health %+v after Argo CD reported it healthy", p.Rule.Value().Name, p.Cluster.Value().Name, h)
			}
		}
	}
	pub := e.pub.(*countingPublisher)
	pub.n = 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := e.applyCluster(ctx, rancherCluster(b, clusters+i), uint64(clusters+i+1), 0); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if pub.n != b.N*rules {
		b.Fatalf("%d intents for %d new clusters, want %d", pub.n, b.N, b.N*rules)
	}
	b.ReportMetric(perCluster, "live-B/cluster")
	b.ReportMetric(perClusterInstalled, "live-B/cluster-installed")
	b.ReportMetric(perClusterHealthy, "live-B/cluster-healthy")
}

// succeedInstalls reports every install intent of e's pairs succeeded, as argo-syncer does.
func succeedInstalls(b *testing.B, e *engine) {
	var succeeded []events.Event
	for _, pairs := range e.pairs {
		for _, p := range pairs {
			for _, st := range p.Enforcements {
				succeeded = append(succeeded, &events.InstallSucceeded{IntentID: st.intentID(), Rule: p.Rule.Value(), Cluster: p.Cluster.Value().Name,
					Enforcement: st.Name, Application: p.Cluster.Value().Name + "-" + st.Name, Created: true, SpecHash: st.SpecHash})
			}
		}
	}
	for _, ev := range succeeded {
		if err := e.applyOutcome(context.Background(), ev, events.Meta{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRuleStatus measures what each ClusterRule's status costs at the pipeline
// benchmark's 10,000 clusters × 10 rules, all installed, when one cluster has appeared since
// the last status: each iteration adds a cluster, then computes one rule's status under the
// engine's mutex, as the status notifier does for every rule a change concerns (once its
// notices pause for STATUS_INTERVAL, and every ten intervals while they keep coming). New
// clusters wait for that mutex meanwhile.
func BenchmarkRuleStatus(b *testing.B) {
	const clusters, rules = 10000, 10
	e := testEngine(persistNothing{newMemStore()}, &countingPublisher{}, newMetrics(nil))
	ctx := context.Background()
	applyPipelineRules(b, e, rules)
	for i := range clusters {
		if err := e.applyCluster(ctx, rancherCluster(b, i), uint64(i+1), 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.applyListed(ctx, &events.SourceListed{Source: rancherSource(), Scan: 1, Known: clusters}); err != nil {
		b.Fatal(err)
	}
	succeedInstalls(b, e)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if err := e.applyCluster(ctx, rancherCluster(b, clusters+i), uint64(clusters+i+1), 0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		st, _ := e.status(fmt.Sprintf("enforcement/pipeline-%d", i%rules), 1)
		if int(st.MatchedClusters) != clusters+i+1 {
			b.Fatalf("status counts %d matched clusters, want %d", st.MatchedClusters, clusters+i+1)
		}
	}
}

// applyPipelineRules applies the pipeline benchmark's rules to e: rule i installs package
// agent-i on every cluster of a Rancher source.
func applyPipelineRules(b *testing.B, e *engine, rules int) {
	for i := range rules {
		cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: fmt.Sprintf("pipeline-%d", i),
			UID: types.UID(fmt.Sprintf("uid-%03d", i)), Generation: 1}}
		cr.Spec.Source = v1beta1.Source{Rancher: &v1beta1.RancherSource{}}
		cr.Spec.Enforcements = []v1beta1.Enforcement{{Name: fmt.Sprintf("agent-%d", i), Repo: fmt.Sprintf("https://git.example/agent-%d", i),
			Path: "charts/agent", Namespace: "monitoring"}}
		if err := e.applyRule(context.Background(), ruleFromSpec(cr, "enforcement")); err != nil {
			b.Fatal(err)
		}
	}
}

// rancherCluster is cluster i of a Rancher source, with the attributes its server lists, decoded
// from JSON as an event brings it.
func rancherCluster(b *testing.B, i int) events.Cluster {
	id, name := fmt.Sprintf("c-%05d", i), fmt.Sprintf("cluster-%05d", i)
	labels := map[string]string{"driver": "googleKubernetesEngine", "env": "prod", "cattle.io/creator": "norman"}
	sent, err := json.Marshal(events.Cluster{Source: rancherSource(), Key: id, Name: name, Identity: "rancher:https://rancher.example/" + id,
		URL: "https://rancher.example/k8s/clusters/" + id, State: "active", Eligible: true, Labels: labels,
		Attributes: map[string]any{"id": id, "name": name, "state": "active", "driver": "googleKubernetesEngine", "provider": "gke",
			"version": map[string]any{"gitVersion": "v1.30.4", "major": "1", "minor": "30"}, "nodeCount": float64(3),
			"created": "2026-01-02T03:04:05Z", "createdTS": float64(1767323045000), "creatorId": "user-abcde",
			"uuid": fmt.Sprintf("5f3c1a2b-0000-4000-8000-%012d", i), "internal": false, "type": "cluster", "baseType": "cluster",
			"labels":      map[string]any{"driver": "googleKubernetesEngine", "env": "prod", "cattle.io/creator": "norman"},
			"annotations": map[string]any{"authz.management.cattle.io/creator-role-bindings": `{"created":["cluster-owner"]}`}}})
	if err != nil {
		b.Fatal(err)
	}
	var c events.Cluster
	if err := json.Unmarshal(sent, &c); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkPairRecordEncode measures the encoding of one pair's stored record, as every
// decision and outcome writes it: an installed enforcement with Argo CD's health.
func BenchmarkPairRecordEncode(b *testing.B) {
	p := benchPair()
	b.ReportAllocs()
	for range b.N {
		if _, err := json.Marshal(p.record()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutcomes measures install outcomes folded back into their pairs as the consumer hands
// them over, consumerConcurrency at a time (events.ConsumerOptions' default), each pair's record
// stored in a real JetStream KV bucket of a nats-server process: the cost of a fleet's burst of
// "install succeeded" after its Applications are created. Each iteration is one outcome, of a
// pair of its own; cpu-ms/op is this process's CPU (the engine and its NATS client), not the
// server's.
func BenchmarkOutcomes(b *testing.B) {
	const rules, consumerConcurrency = 10, 16
	ctx := context.Background()
	e := testEngine(testKVStore(b, testenv.StartNATSProcess(b).JetStream(b)), &countingPublisher{}, newMetrics(nil))
	applyPipelineRules(b, e, rules)
	for i := range b.N/rules + 1 {
		if err := e.applyCluster(ctx, rancherCluster(b, i), uint64(i+1), 0); err != nil {
			b.Fatal(err)
		}
	}
	outcomes := make(chan events.Event, b.N)
	for _, pairs := range e.pairs {
		for _, p := range pairs {
			for _, st := range p.Enforcements {
				if len(outcomes) < b.N {
					outcomes <- &events.InstallSucceeded{IntentID: st.intentID(), Rule: p.Rule.Value(), Cluster: p.Cluster.Value().Name,
						Enforcement: st.Name, Application: p.Cluster.Value().Name + "-" + st.Name, Created: true, SpecHash: st.SpecHash}
				}
			}
		}
	}
	close(outcomes)
	var wg sync.WaitGroup
	errs := make(chan error, consumerConcurrency)
	b.ResetTimer()
	cpu := testenv.CPUTime()
	for range consumerConcurrency {
		wg.Go(func() {
			for ev := range outcomes {
				if err := e.applyOutcome(ctx, ev, events.Meta{ID: ev.ID()}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	testenv.ReportCPU(b, cpu, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "outcomes/s")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	installed := 0
	for _, pairs := range e.pairs {
		for _, p := range pairs {
			if st := p.Enforcements[0]; st.Installed {
				installed++
			}
		}
	}
	if installed != b.N {
		b.Fatalf("%d pairs installed after %d outcomes", installed, b.N)
	}
}
