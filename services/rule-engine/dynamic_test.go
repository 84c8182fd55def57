package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/compat"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyExample creates an example manifest unchanged except for its namespace (and name, when
// rename is set).
func (e *env) applyExample(file, rename string) {
	e.t.Helper()
	objs := compat.Objects(e.t, examples+file)
	if len(objs) != 1 {
		e.t.Fatalf("%s holds %d objects, want 1", file, len(objs))
	}
	u := objs[0]
	u.SetNamespace(e.ns)
	if rename != "" {
		u.SetName(rename)
	}
	if err := e.c.Create(context.Background(), u); err != nil {
		e.t.Fatal(err)
	}
}

// installsOf returns the install intents of one rule, by "cluster enforcement".
func (e *env) installsOf(rule string) map[string][]*events.InstallIntent {
	out := map[string][]*events.InstallIntent{}
	for _, ev := range e.intents() {
		if in, ok := ev.(*events.InstallIntent); ok && in.Rule.Name == rule {
			k := in.Cluster.Name + " " + in.Enforcement.Name
			out[k] = append(out[k], in)
		}
	}
	return out
}

// TestDynamicRulesAndTemplateErrors checks the README's dynamic rule, the network allow-list,
// a template error limited to one (rule, cluster) pair, and the render cache.
func TestDynamicRulesAndTemplateErrors(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := calls.Add(1)
		fmt.Fprintf(w, `{"uuid": "uuid-%d"}`, n)
	}))
	defer srv.Close()

	e := newEnv(t)
	e.vars["TEMPLATE_HTTP_ALLOW"] = "127.0.0.1"
	e.vars["TEMPLATE_HTTP_ALLOWED_NETWORKS"] = "127.0.0.1" // the test server listens on loopback
	e.start()
	e.applyExample("readme-02-dynamic-rule-jinja.yaml", "")
	e.applyExample("readme-03-dynamic-rule-requests.yaml", "requests-httpbin") // httpbin.org is not allowed
	e.createRule("uuid", v1beta1.ClusterRuleSpec{
		Enforcements: []v1beta1.Enforcement{{Name: "guestbook", Repo: "https://github.com/argoproj/argocd-example-apps",
			Helm: &v1beta1.Helm{Parameters: map[string]apiextensionsJSON{
				"uuid": raw(`"${{ requests.get('` + srv.URL + `/uuid').json()['uuid'] }}"`)}}}},
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "paused", Operator: metav1.LabelSelectorOpDoesNotExist}}},
	})
	e.createRule("partial", v1beta1.ClusterRuleSpec{
		Enforcements: []v1beta1.Enforcement{{Repo: "https://github.com/argoproj/argocd-example-apps",
			Name: "${% if name == 'cluster2' %}${{ requests.get('https://denied.example/x') }}${% endif %}guestbook"}},
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
	})
	c1, c2 := testCluster("cluster1", nil, true), testCluster("cluster2", nil, true)
	e.publish(appeared(c1, 1), appeared(c2, 2))

	var dyn map[string][]*events.InstallIntent
	testenv.Eventually(t, 20*time.Second, func() error {
		dyn = e.installsOf("dynamic-rule")
		if len(dyn) != 2 || len(e.installsOf("uuid")) != 2 || len(e.installsOf("partial")) != 1 {
			return fmt.Errorf("dynamic %d, uuid %d, partial %d installs", len(dyn), len(e.installsOf("uuid")), len(e.installsOf("partial")))
		}
		return nil
	})
	one := dyn["cluster1 guestbook-cluster1"]
	if len(one) != 1 {
		t.Fatalf("cluster1 installs: %v", dyn)
	}
	en := one[0].Enforcement
	if en.Namespace != "cluster1" || en.Path != "helm-guestbook" || fmt.Sprint(en.HelmParameters) !=
		fmt.Sprint([]events.HelmParameter{{Name: "clusterURL", Value: c1.URL}, {Name: "replicaCount", Value: "10"}}) {
		t.Errorf("cluster1 enforcement = %+v", en)
	}
	if other := dyn["cluster2 guestbook-other"]; len(other) != 1 || other[0].Enforcement.Namespace != "cluster2" {
		t.Errorf("cluster2 installs: %v", dyn)
	}
	if p := e.installsOf("partial"); len(p["cluster1 guestbook"]) != 1 {
		t.Errorf("partial installs: %v", p)
	}

	e.waitReady("requests-httpbin", v1beta1.ReasonTemplateError, func(st v1beta1.ClusterRuleStatus) error {
		if msg := e.rule("requests-httpbin").Status.Conditions[0].Message; !strings.Contains(msg, "2 cluster(s)") || !strings.Contains(msg, "TEMPLATE_HTTP_ALLOW") {
			return fmt.Errorf("message %q", msg)
		}
		return nil
	})
	e.waitReady("partial", v1beta1.ReasonTemplateError, func(st v1beta1.ClusterRuleStatus) error {
		if msg := e.rule("partial").Status.Conditions[0].Message; !strings.Contains(msg, "1 cluster(s); cluster2:") {
			return fmt.Errorf("message %q", msg)
		}
		return nil
	})
	e.waitReady("dynamic-rule", v1beta1.ReasonProgressing, nil)

	// The uuid template ran once per cluster. A cluster that stops and starts matching again
	// renders from the cache: same uuid, no new call.
	uuids := func() map[string]bool {
		m := map[string]bool{}
		for _, ins := range e.installsOf("uuid") {
			for _, in := range ins {
				m[in.Cluster.Name+"="+in.Enforcement.HelmParameters[0].Value] = true
			}
		}
		return m
	}
	before := uuids()
	if calls.Load() != 2 || len(before) != 2 {
		t.Fatalf("uuid calls %d, values %v", calls.Load(), before)
	}
	e.publish(&events.ClusterUpdated{Cluster: testCluster("cluster1", map[string]string{"paused": "yes"}, true), Revision: 3, Changed: []string{"labels"}})
	e.publish(&events.ClusterUpdated{Cluster: c1, Revision: 4, Changed: []string{"labels"}})
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := len(e.installsOf("uuid")["cluster1 guestbook"]); n != 2 {
			return fmt.Errorf("%d uuid installs on cluster1", n)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // let a wrong extra render show up
	if got := uuids(); calls.Load() != 2 || fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("after relabel: calls %d, uuids %v, want 2 and %v", calls.Load(), got, before)
	}
}
