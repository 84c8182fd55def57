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
	"sigs.k8s.io/yaml"
)

// explainOf asks the running rule engine which rules match the clusters named name, as the
// command line does, and returns the result or the micro error ("400: ...").
func (e *env) explainOf(name string) (*events.ExplainClusterResult, string) {
	e.t.Helper()
	body, err := json.Marshal(events.ExplainClusterRequest{Cluster: name})
	if err != nil {
		e.t.Fatal(err)
	}
	msg, err := e.nc.Request(events.ExplainClusterSubject, body, 30*time.Second)
	if err != nil {
		e.t.Fatalf("explain request: %v", err)
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		return nil, msg.Header.Get(micro.ErrorCodeHeader) + ": " + desc
	}
	var res events.ExplainClusterResult
	if err := json.Unmarshal(msg.Data, &res); err != nil {
		e.t.Fatal(err)
	}
	return &res, ""
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

// TestExplainCluster runs the rule engine for real and asks, for a cluster name two sources
// list, what every live rule says of each cluster: the rule that matches (with the enforcements
// its templated render gives), one whose label differs, one of the other source, and a tenant's
// rule no ClusterRuleGrant permits; an ineligible cluster and a name no source lists; an empty
// name is refused. Nothing is written.
func TestExplainCluster(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// A second watched namespace, which no ClusterRuleGrant covers.
	tenantNS := e.kube.Namespace(t, e.ns+"-t")
	e.vars["WATCH_NAMESPACES"] = e.ns + "," + tenantNS
	e.start()
	static := events.NewSourceRef(events.SourceKindStatic, "enforcement", "", nil)
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
	before := e.waitStill()

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
	ns, tns := e.ns, tenantNS
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
