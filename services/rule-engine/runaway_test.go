package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// engineLoop is a runaway loop of 10^9 steps whose ranges are short, so that under the race
// detector on a busy machine the guard is checked often (the renderer's own tests use the
// longest ranges allowed).
const engineLoop = "${% for a in range(1000) %}${% for b in range(1000) %}${% for c in range(1000) %}${% endfor %}${% endfor %}${% endfor %}"

// renderCounter is an allowed template host that counts the requests.get calls made to it: a
// template that calls it once per render counts its renders.
func renderCounter(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// runawayRule is a rule over the default Rancher source whose render calls the counter, then
// loops for hours.
func runawayRule(counterURL string) v1beta1.ClusterRuleSpec {
	return v1beta1.ClusterRuleSpec{Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
		Enforcements: []v1beta1.Enforcement{{Name: "${{ name }}-loop",
			Repo: "${{ requests.get('" + counterURL + "/render').text }}" + engineLoop}}}
}

// TestRunawayTemplateFailsOnlyItsPairs: a rule whose template loops for hours, created over
// many clusters, fails each (rule, cluster) pair with TemplateError within
// TEMPLATE_RENDER_TIMEOUT (renderParallel at a time), and meanwhile a cluster event of another
// rule is handled at once: rendering no longer holds the engine's mutex.
func TestRunawayTemplateFailsOnlyItsPairs(t *testing.T) {
	const clusters = 20
	const limit = time.Second
	waves := (clusters + renderParallel - 1) / renderParallel
	srv, hits := renderCounter(t)
	e := newEnv(t)
	e.vars["TEMPLATE_RENDER_TIMEOUT"] = limit.String()
	e.vars["TEMPLATE_HTTP_ALLOW"] = "127.0.0.1"
	e.vars["TEMPLATE_HTTP_ALLOWED_NETWORKS"] = "127.0.0.1" // the counter listens on loopback
	e.start()

	gke := map[string]string{"driver": "gke"}
	e.createRule("other", v1beta1.ClusterRuleSpec{Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: gke}},
		Enforcements: []v1beta1.Enforcement{{Name: "${{ name }}-app", Repo: "https://example.com/r"}}})
	e.createRule("probe", v1beta1.ClusterRuleSpec{Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
		Enforcements: []v1beta1.Enforcement{{Name: "probe", Repo: "https://example.com/r"}}})
	for i := range clusters {
		e.publish(appeared(testCluster(fmt.Sprintf("c%02d", i), nil, true), uint64(i+1)))
	}
	e.waitReady("probe", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != clusters {
			return fmt.Errorf("%d clusters known, want %d", st.MatchedClusters, clusters)
		}
		return nil
	})

	created := time.Now()
	e.createRule("runaway", runawayRule(srv.URL))
	testenv.Eventually(t, 20*time.Second, func() error {
		if hits.Load() == 0 {
			return fmt.Errorf("no render started")
		}
		return nil
	})
	other := testCluster("g1", nil, true)
	other.Source.ID = events.SourceID("rancher", "enforcement", "rancher", gke)
	sent := time.Now()
	e.publish(appeared(other, 1))
	testenv.Eventually(t, 60*time.Second, func() error {
		if len(e.installsOf("other")["g1 g1-app"]) != 1 {
			return fmt.Errorf("no install of g1-app yet")
		}
		return nil
	})
	handled := time.Since(sent)
	rendering := hits.Load() < clusters || len(e.rule("runaway").Status.Conditions) == 0
	e.waitReady("runaway", v1beta1.ReasonTemplateError, func(st v1beta1.ClusterRuleStatus) error {
		msg := e.rule("runaway").Status.Conditions[0].Message
		if !strings.Contains(msg, fmt.Sprintf("%d cluster(s)", clusters)) || !strings.Contains(msg, "TEMPLATE_RENDER_TIMEOUT") {
			return fmt.Errorf("message %q", msg)
		}
		return nil
	})
	failed := time.Since(created)
	t.Logf("another rule's cluster event handled in %s while the runaway rule rendered (still rendering then: %v); "+
		"%d pairs failed %s after the rule was created (TEMPLATE_RENDER_TIMEOUT %s, %d renders at a time)",
		handled, rendering, clusters, failed, limit, renderParallel)
	if handled > 3*time.Second {
		t.Errorf("another rule's event took %s, want well under a second (bound 3s)", handled)
	}
	// Batches of renderParallel, each stopped at the limit, plus the status interval and a busy
	// machine; rendering the pairs one after the other under the mutex took clusters × limit.
	if bound := time.Duration(waves)*limit + 6*time.Second; failed > bound {
		t.Errorf("the %d pairs failed after %s, want within %s", clusters, failed, bound)
	}
	if n := len(e.installsOf("runaway")); n != 0 {
		t.Errorf("%d installs of the runaway rule", n)
	}
}

// TestStoppedRenderIsRememberedAcrossRestart: a render stopped at TEMPLATE_RENDER_TIMEOUT is not
// made again by a later event nor after a restart, and is made again once the rule changes.
func TestStoppedRenderIsRememberedAcrossRestart(t *testing.T) {
	srv, hits := renderCounter(t)
	e := newEnv(t)
	e.vars["TEMPLATE_RENDER_TIMEOUT"] = "500ms"
	e.vars["TEMPLATE_HTTP_ALLOW"] = "127.0.0.1"
	e.vars["TEMPLATE_HTTP_ALLOWED_NETWORKS"] = "127.0.0.1" // the counter listens on loopback
	stop := e.start()
	e.createRule("runaway", runawayRule(srv.URL))
	e.publish(appeared(testCluster("c1", nil, true), 1), appeared(testCluster("c2", nil, true), 2))
	templateError := func(check string) {
		t.Helper()
		e.waitReady("runaway", v1beta1.ReasonTemplateError, func(st v1beta1.ClusterRuleStatus) error {
			if msg := e.rule("runaway").Status.Conditions[0].Message; !strings.Contains(msg, "2 cluster(s)") || !strings.Contains(msg, check) {
				return fmt.Errorf("message %q", msg)
			}
			return nil
		})
	}
	templateError("TEMPLATE_RENDER_TIMEOUT")
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d renders, want 2", n)
	}
	// A cluster event with new variables does not render the pair again.
	e.publish(&events.ClusterUpdated{Cluster: testCluster("c1", map[string]string{"team": "a"}, true), Revision: 3, Changed: []string{"labels"}})

	stop()
	e.start() // ready: every rule was evaluated again
	time.Sleep(500 * time.Millisecond)
	templateError("not rendered again until the rule changes")
	if n := hits.Load(); n != 2 {
		t.Errorf("%d renders after an update and a restart, want still 2", n)
	}

	e.updateRule("runaway", func(cr *v1beta1.ClusterRule) { cr.Spec.Enforcements[0].Path = "changed" })
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := hits.Load(); n != 4 {
			return fmt.Errorf("%d renders, want 4", n)
		}
		return nil
	})
	templateError("TEMPLATE_RENDER_TIMEOUT")
}

// TestEngineRendersLeaveNoGoroutines: the engine's renders of a runaway rule over many
// clusters all return, and nothing of them keeps running afterwards.
func TestEngineRendersLeaveNoGoroutines(t *testing.T) {
	e := testEngine(newMemStore(), &recordingPublisher{}, newMetrics(nil))
	e.renderer.limit = 100 * time.Millisecond
	ctx := context.Background()
	for i := range 40 {
		if err := e.applyCluster(ctx, testCluster(fmt.Sprintf("c%02d", i), nil, true), uint64(i+1), 0); err != nil {
			t.Fatal(err)
		}
	}
	baseline := runtime.NumGoroutine()
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "runaway", UID: types.UID("u1"), Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
			Enforcements: []v1beta1.Enforcement{{Name: "${{ name }}", Repo: engineLoop}}}}
	start := time.Now()
	if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	t.Logf("40 runaway renders (limit 100ms, %d at a time) took %s", renderParallel, time.Since(start))
	if st, _ := e.status("ns/runaway", 1); len(st.Conditions) == 0 || st.Conditions[0].Reason != v1beta1.ReasonTemplateError {
		t.Errorf("status %+v, want TemplateError", st)
	}
	settleGoroutines(t, baseline)
}
