package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/nats-io/nats.go/micro"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ask sends req to the running rule engine's endpoint subject, as the command line does, and
// decodes the answer into res; it returns the answer as sent, or the micro error ("400: ...").
func (e *env) ask(subject string, req, res any) (raw []byte, microErr string) {
	e.t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		e.t.Fatal(err)
	}
	msg, err := e.nc.Request(subject, body, 30*time.Second)
	if err != nil {
		e.t.Fatalf("request on %s: %v", subject, err)
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		return nil, msg.Header.Get(micro.ErrorCodeHeader) + ": " + desc
	}
	if err := json.Unmarshal(msg.Data, res); err != nil {
		e.t.Fatal(err)
	}
	return msg.Data, ""
}

// explainOf asks the running rule engine which rules match the clusters named name, as the
// command line does, and returns the result or the micro error ("400: ...").
func (e *env) explainOf(name string) (*events.ExplainClusterResult, string) {
	e.t.Helper()
	var res events.ExplainClusterResult
	if _, msg := e.ask(events.ExplainClusterSubject, events.ExplainClusterRequest{Cluster: name}, &res); msg != "" {
		return nil, msg
	}
	return &res, ""
}

// explainRuleOf asks the running rule engine which clusters the live rule ns/name matches, as
// the command line does, and returns the result and the answer as sent, or the micro error.
func (e *env) explainRuleOf(ns, name string) (*events.ExplainRuleResult, string, string) {
	e.t.Helper()
	var res events.ExplainRuleResult
	raw, msg := e.ask(events.ExplainRuleSubject, events.ExplainRuleRequest{Namespace: ns, Name: name}, &res)
	if msg != "" {
		return nil, "", msg
	}
	return &res, string(raw), ""
}

// verdictLines summarises a cluster's verdicts as "rule matches installs|reason [installed]".
func verdictLines(c events.ExplainedCluster) string {
	var s []string
	for _, v := range c.Rules {
		l := fmt.Sprintf("%s %v ", v.Rule, v.Matches)
		if v.Matches {
			l += strings.Join(v.Installs, ",")
		} else {
			l += v.Reason
		}
		if len(v.Installed) > 0 {
			l += " [" + strings.Join(v.Installed, ",") + "]"
		}
		s = append(s, l)
	}
	return strings.Join(s, "\n")
}

// explainFleet is the world the explain tests ask about, with the rule engine running: the
// rancher clusters prod-a (env=prod), dev-c (env=dev) and prod-d (env=prod, not eligible), a
// static prod-a, and the rules fleet (rancher env=prod), dev (rancher env=dev), statics (static
// env=prod) of the test's namespace, and tenant (rancher env=prod) of tenantNS, a second watched
// namespace no ClusterRuleGrant covers. It returns once the installs are made and the stream and
// buckets are still, with their last sequences (lastSeqs).
func explainFleet(t *testing.T) (e *env, tenantNS string, static events.SourceRef, before string) {
	e = newEnv(t)
	ctx := context.Background()
	// A second watched namespace, which no ClusterRuleGrant covers.
	tenantNS = e.kube.Namespace(t, e.ns+"-t")
	e.vars["WATCH_NAMESPACES"] = e.ns + "," + tenantNS
	e.start()
	static = events.NewSourceRef(events.SourceKindStatic, "enforcement", "", nil)
	staticProdA := testCluster("prod-a", map[string]string{"env": "prod"}, true)
	staticProdA.Source = static
	e.publish(appeared(testCluster("prod-a", map[string]string{"env": "prod"}, true), 1),
		appeared(testCluster("dev-c", map[string]string{"env": "dev"}, true), 2),
		appeared(testCluster("prod-d", map[string]string{"env": "prod"}, false), 3),
		appeared(staticProdA, 4))
	for _, manifest := range []string{
		fleetRule,
		strings.Replace(strings.Replace(fleetRule, "name: fleet", "name: dev", 1), "env: prod", "env: dev", 1),
		strings.Replace(strings.Replace(fleetRule, "name: fleet", "name: statics", 1), "rancher:", "static:", 1),
		strings.Replace(strings.Replace(fleetRule, "namespace: NS", "namespace: "+tenantNS, 1), "name: fleet", "name: tenant", 1),
	} {
		var cr v1beta1.ClusterRule
		if err := yaml.Unmarshal([]byte(strings.ReplaceAll(manifest, "NS", e.ns)), &cr); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Create(ctx, &cr); err != nil {
			t.Fatal(err)
		}
	}
	e.waitIntentSet("install prod-a guestbook", "install prod-a agent", "install dev-c guestbook", "install dev-c agent",
		"install prod-a guestbook", "install prod-a agent")
	return e, tenantNS, static, e.waitStill()
}

// TestExplainCluster runs the rule engine for real and asks, for a cluster name two sources
// list, what every live rule says of each cluster: the rule that matches (with the enforcements
// its templated render gives), one whose label differs, one of the other source, and a tenant's
// rule no ClusterRuleGrant permits; an ineligible cluster and a name no source lists; an empty
// name is refused. Nothing is written.
func TestExplainCluster(t *testing.T) {
	e, tenantNS, static, before := explainFleet(t)
	ns, tns := e.ns, tenantNS
	res, msg := e.explainOf("prod-a")
	if msg != "" {
		t.Fatal(msg)
	}
	if res.Cluster != "prod-a" || len(res.Clusters) != 2 {
		t.Fatalf("explain prod-a: %+v", res)
	}
	byKind := map[string]events.ExplainedCluster{}
	for _, c := range res.Clusters {
		byKind[c.Source.Kind] = c
	}
	rancher, staticC := byKind[events.SourceKindRancher], byKind[events.SourceKindStatic]
	if rancher.Source.ID != rancherSource().ID || rancher.Labels["env"] != "prod" || !rancher.Eligible || rancher.State != "active" || staticC.Source.ID != static.ID {
		t.Errorf("clusters of prod-a: %+v", res.Clusters)
	}
	notPermitted := tns + "/tenant false no ClusterRuleGrant permits the rule (NotPermitted): no ClusterRuleGrant in enforcement covers namespace " +
		tns + "; rules outside enforcement act only within a grant"
	want := strings.Join([]string{
		notPermitted,
		ns + `/dev false label env is "prod" (want "dev")`,
		ns + "/fleet true guestbook,agent [agent,guestbook]",
		ns + "/statics false reads another source (static " + static.ID + ")",
	}, "\n")
	if got := verdictLines(rancher); got != want {
		t.Errorf("verdicts on the rancher prod-a:\n%s\nwant:\n%s", got, want)
	}
	want = strings.Join([]string{
		notPermitted,
		ns + "/dev false reads another source (rancher " + rancherSource().ID + ")",
		ns + "/fleet false reads another source (rancher " + rancherSource().ID + ")",
		ns + "/statics true guestbook,agent [agent,guestbook]",
	}, "\n")
	if got := verdictLines(staticC); got != want {
		t.Errorf("verdicts on the static prod-a:\n%s\nwant:\n%s", got, want)
	}

	res, msg = e.explainOf("prod-d")
	if msg != "" || len(res.Clusters) != 1 || !strings.Contains(verdictLines(res.Clusters[0]), ns+"/fleet false not eligible: active\n") {
		t.Errorf("explain prod-d: %s %+v", msg, res)
	}
	res, msg = e.explainOf("nowhere")
	if msg != "" || res.Cluster != "nowhere" || res.Clusters == nil || len(res.Clusters) != 0 {
		t.Errorf("explain of a name no source lists: %s %+v", msg, res)
	}
	if res, msg := e.explainOf(" "); msg != "400: the cluster name is empty" {
		t.Errorf("explain of an empty name: %q %+v", msg, res)
	}
	if after := e.lastSeqs(); after != before {
		t.Errorf("explains wrote: before %s, after %s", before, after)
	}
}

// clusterLines summarises an explained rule's clusters as "name true" or "name false reason",
// then the withheld counts as "N withheld: reason".
func clusterLines(res *events.ExplainRuleResult) string {
	var s []string
	for _, c := range res.Clusters {
		s = append(s, strings.TrimSpace(fmt.Sprintf("%s %v %s", c.Name, c.Matches, c.Reason)))
	}
	for _, w := range res.Withheld {
		s = append(s, fmt.Sprintf("%d withheld: %s", w.Count, w.Reason))
	}
	return strings.Join(s, "\n")
}

// TestExplainRule runs the rule engine for real and asks, for live rules, which clusters of
// their source they match now and why not the others: the rancher rule (a matching cluster, one
// whose label differs, an ineligible one), the static one; a tenant's rule no ClusterRuleGrant
// permits gets every cluster of its source counted as NotPermitted and none named, and once a
// grant narrows it to env=dev, the clusters outside the grant are counted, not named, and the one
// inside is named with its reason. An unknown rule is a 404, an empty name and an unwatched
// namespace a 400. Nothing is written.
func TestExplainRule(t *testing.T) {
	e, tenantNS, static, before := explainFleet(t)
	ns := e.ns

	res, _, msg := e.explainRuleOf(ns, "fleet")
	if msg != "" {
		t.Fatal(msg)
	}
	want := strings.Join([]string{
		`dev-c false label env is "dev" (want "prod")`,
		"prod-a true",
		"prod-d false not eligible: active",
	}, "\n")
	if got := clusterLines(res); got != want || res.Rule.UID == "" || res.Rule.Generation != 1 || res.Source.ID != rancherSource().ID ||
		res.Inactive != "" || res.Held != nil || len(res.TemplateErrors) != 0 {
		t.Errorf("explain rule fleet: %+v\n%s\nwant:\n%s", res, got, want)
	}
	res, _, msg = e.explainRuleOf(ns, "statics")
	if msg != "" || clusterLines(res) != "prod-a true" || res.Source.ID != static.ID {
		t.Errorf("explain rule statics: %s %+v", msg, res)
	}

	res, raw, msg := e.explainRuleOf(tenantNS, "tenant")
	if msg != "" {
		t.Fatal(msg)
	}
	want = "3 withheld: no ClusterRuleGrant permits the rule (NotPermitted): no ClusterRuleGrant in enforcement covers namespace " +
		tenantNS + "; rules outside enforcement act only within a grant"
	if got := clusterLines(res); got != want || res.Clusters == nil {
		t.Errorf("explain rule tenant, no grant:\n%s\nwant:\n%s", got, want)
	}
	for _, name := range []string{"prod-a", "dev-c", "prod-d"} {
		if strings.Contains(raw, name) {
			t.Errorf("the answer for a NotPermitted rule names cluster %s: %s", name, raw)
		}
	}
	// The preview of the same rule names none either: it counts them.
	tenantRule := strings.Replace(strings.Replace(fleetRule, "namespace: NS", "namespace: "+tenantNS, 1), "name: fleet", "name: tenant", 1)
	if pr, msg := e.previewOf(tenantRule); msg != "" || len(pr.Clusters) != 0 || len(pr.Withheld) != 1 || pr.Withheld[0].Count != 3 ||
		!strings.Contains(pr.Withheld[0].Reason, "NotPermitted") {
		t.Errorf("preview of the NotPermitted rule: %s %+v", msg, pr)
	}

	for _, c := range []struct{ ns, name, want string }{
		{ns, "nope", "404: no ClusterRule " + ns + "/nope on the API server"},
		{ns, " ", "400: the rule's namespace and name are both required"},
		{"", "fleet", "400: the rule's namespace and name are both required"},
		{"default", "fleet", "400: namespace default is not one this rule engine watches (WATCH_NAMESPACES " + ns + "," + tenantNS + ")"},
	} {
		if res, _, msg := e.explainRuleOf(c.ns, c.name); msg != c.want {
			t.Errorf("explain rule %s/%s: %q %+v, want %q", c.ns, c.name, msg, res, c.want)
		}
	}
	if after := e.lastSeqs(); after != before {
		t.Errorf("explains wrote: before %s, after %s", before, after)
	}

	grant := &v1beta1.ClusterRuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: tenantNS},
		Spec: v1beta1.ClusterRuleGrantSpec{SourceNamespaces: []string{tenantNS}, Sources: []v1beta1.GrantSource{{Kind: "rancher"}},
			ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}},
			SourceRepos:     []string{"*"}, DestinationNamespaces: []string{"*"}}}
	if err := e.c.Create(context.Background(), grant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), grant) })
	res, raw, msg = e.explainRuleOf(tenantNS, "tenant")
	want = "dev-c false label env is \"dev\" (want \"prod\")\n2 withheld: outside the cluster selector of the rule's ClusterRuleGrant"
	if got := clusterLines(res); msg != "" || got != want || strings.Contains(raw, "prod-a") || strings.Contains(raw, "prod-d") {
		t.Errorf("explain rule tenant under a grant for env=dev: %s\n%s\nwant:\n%s\nanswer: %s", msg, got, want, raw)
	}
}
