package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// staticSourceOf is the source of a rule reading the static ConfigMap cm.
func staticSourceOf(cm string) (v1beta1.Source, events.SourceRef) {
	src := v1beta1.Source{Static: &v1beta1.StaticSource{ConfigMap: cm}}
	ref, err := src.Ref("enforcement")
	if err != nil {
		panic(err)
	}
	return src, ref
}

// staticCluster is cluster name of the static source ref read from ConfigMap cm, with the
// identity the scanner gives it.
func staticCluster(ref events.SourceRef, cm, name string) events.Cluster {
	return events.Cluster{Source: ref, Key: name, Name: name, Identity: "static:enforcement/" + cm + "/" + name,
		URL: "https://" + name + ".example:6443", State: "active", Eligible: true}
}

// handoverCheck checks the SourceHandover message: how many clusters wait and why.
func (e *env) handoverCheck(rule string, waiting int, why string) func(v1beta1.ClusterRuleStatus) error {
	return func(v1beta1.ClusterRuleStatus) error {
		msg := e.rule(rule).Status.Conditions[0].Message
		for _, want := range []string{fmt.Sprintf("the %d cluster(s) of its old source keep what they have", waiting), why} {
			if !strings.Contains(msg, want) {
				return fmt.Errorf("message %q lacks %q", msg, want)
			}
		}
		return nil
	}
}

// TestRenamedStaticConfigMapIsAHandover: a rule over the static ConfigMap cm1 (clusters a, b, c;
// Cascade) moves to cm2, which lists a and b again (new identities) and a new d. While cm2 has
// not listed completely, or is degraded, nothing of cm1 is uninstalled (SourceHandover), d is
// installed and a and b wait; an enforcement removed meanwhile is uninstalled at once. After
// cm2's complete listing a and b are taken over in place: install intents for the new target
// replacing the old identity, no uninstall; only c, which cm2 does not list, is let go.
func TestRenamedStaticConfigMapIsAHandover(t *testing.T) {
	e := newEnv(t)
	e.start()
	src1, ref1 := staticSourceOf("cm1")
	src2, ref2 := staticSourceOf("cm2")
	for i, name := range []string{"a", "b", "c"} {
		e.publish(appeared(staticCluster(ref1, "cm1", name), uint64(i+1)))
	}
	e.publish(&events.SourceListed{Source: ref1, Scan: 1, Known: 3})
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(), Source: src1, DeletionPolicy: events.DeletionCascade})
	before := []string{"install a guestbook", "install a helm-guestbook", "install b guestbook", "install b helm-guestbook",
		"install c guestbook", "install c helm-guestbook"}
	e.waitIntentSet(before...)

	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) { cr.Spec.Source = src2 }) // generation 2
	for i, name := range []string{"a", "b", "d"} {
		e.publish(appeared(staticCluster(ref2, "cm2", name), uint64(i+1)))
	}
	waiting := append(before, "install d guestbook", "install d helm-guestbook")
	e.waitReady("fleet", v1beta1.ReasonSourceHandover, e.handoverCheck("fleet", 3, "has not listed completely yet"))
	e.publish(&events.SourceDegraded{Source: ref2, Scan: 1, Reason: events.DegradedPartial, Message: "entry e does not parse", Known: 3})
	e.waitReady("fleet", v1beta1.ReasonSourceHandover, e.handoverCheck("fleet", 3, "is degraded (PartialListing: entry e does not parse)"))
	e.waitIntentSet(waiting...)

	// Removing an enforcement is explicit: it goes now, on the old source's clusters too.
	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) { cr.Spec.Enforcements = cr.Spec.Enforcements[:1] }) // generation 3
	waiting = append(waiting, "uninstall a helm-guestbook EnforcementRemoved", "uninstall b helm-guestbook EnforcementRemoved",
		"uninstall c helm-guestbook EnforcementRemoved", "uninstall d helm-guestbook EnforcementRemoved")
	e.waitReady("fleet", v1beta1.ReasonSourceHandover, e.handoverCheck("fleet", 3, "is degraded"))
	e.waitIntentSet(waiting...)

	// The complete listing: a and b are taken over, c is let go (1 of 4 installed: under the cap).
	e.publish(&events.SourceRecovered{Source: ref2, Scan: 2, DegradedSince: 1, Known: 3},
		&events.SourceListed{Source: ref2, Scan: 2, Known: 3})
	got := e.waitIntentSet(append(waiting, "install a guestbook", "install b guestbook", "uninstall c guestbook NoLongerMatches")...)
	e.waitReady("fleet", v1beta1.ReasonProgressing, nil)
	for _, ev := range got[len(got)-3:] {
		switch in := ev.(type) {
		case *events.InstallIntent:
			want := "static:enforcement/cm1/" + in.Cluster.Name
			if in.Cluster.Replaces != want || in.Cluster.Identity != "static:enforcement/cm2/"+in.Cluster.Name ||
				in.Cluster.Source.ID != ref2.ID || in.Rule.Generation != 3 {
				t.Errorf("takeover install of %s: target %+v, generation %d; want identity cm2 replacing %s, source %s, generation 3",
					in.Cluster.Name, in.Cluster, in.Rule.Generation, want, ref2.ID)
			}
		case *events.UninstallIntent:
			if in.Cluster.Name != "c" || in.DeletionPolicy != events.DeletionCascade {
				t.Errorf("uninstall after the handover: %+v", in)
			}
		}
	}
}

// TestChangedSecretNameMovesNothing: a rancher rule whose secretName changes reads the same
// Rancher (same cluster identities) under a new source id. Once the new source has listed, each
// cluster's pair moves to it with install intents for the new target (no identity replaced) and
// not one uninstall; before that, nothing at all happens.
func TestChangedSecretNameMovesNothing(t *testing.T) {
	e := newEnv(t)
	e.start()
	ref1 := rancherSource()
	ref2 := events.NewSourceRef("rancher", "enforcement", "rancher-ops", nil)
	cluster := func(ref events.SourceRef, name string) events.Cluster {
		c := testCluster(name, norman, true)
		c.Source, c.Identity = ref, "rancher:https://rancher.example/c-"+name
		return c
	}
	e.publish(appeared(cluster(ref1, "a"), 1), appeared(cluster(ref1, "b"), 2), &events.SourceListed{Source: ref1, Scan: 1, Known: 2})
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1], DeletionPolicy: events.DeletionCascade,
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.waitIntentSet("install a guestbook", "install b guestbook")

	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) { cr.Spec.Source.SecretName = "rancher-ops" })
	// The listing is announced before its last cluster event is handled: the handover waits for it.
	e.publish(appeared(cluster(ref2, "a"), 1), &events.SourceListed{Source: ref2, Scan: 1, Known: 2})
	e.waitReady("fleet", v1beta1.ReasonSourceHandover, e.handoverCheck("fleet", 2, "listed 2 cluster(s), 1 seen so far"))
	e.waitIntentSet("install a guestbook", "install b guestbook")

	e.publish(appeared(cluster(ref2, "b"), 2))
	got := e.waitIntentSet("install a guestbook", "install b guestbook", "install a guestbook", "install b guestbook")
	for _, ev := range got[2:] {
		in := ev.(*events.InstallIntent)
		if in.Cluster.Replaces != "" || in.Cluster.Source != ref2 || in.Cluster.Identity != "rancher:https://rancher.example/c-"+in.Cluster.Name {
			t.Errorf("install after the handover: target %+v; want source %+v, the same identity, nothing replaced", in.Cluster, ref2)
		}
	}
	e.waitReady("fleet", v1beta1.ReasonProgressing, nil)
}

// TestHandoverAndRemovedEnforcementInOneEdit drives the engine directly: one edit moves a rule
// to a static ConfigMap that has already listed (another rule reads it) and drops one of its two
// enforcements. The pair is taken over at once: one install of the kept enforcement replacing
// the old identity, one uninstall of the dropped one (EnforcementRemoved), nothing else, and the
// engine keeps one pair, the new cluster's.
func TestHandoverAndRemovedEnforcementInOneEdit(t *testing.T) {
	ctx := context.Background()
	pub := &recordingPublisher{}
	e := testEngine(newMemStore(), pub, newMetrics(nil))
	src1, ref1 := staticSourceOf("cm1")
	src2, ref2 := staticSourceOf("cm2")
	for _, l := range []struct {
		ref events.SourceRef
		cm  string
	}{{ref1, "cm1"}, {ref2, "cm2"}} {
		if err := e.applyCluster(ctx, staticCluster(l.ref, l.cm, "a"), 1); err != nil {
			t.Fatal(err)
		}
		if err := e.applyOutcome(ctx, &events.SourceListed{Source: l.ref, Scan: 1, Known: 1}, events.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fleet", UID: "uid-fleet", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(), Source: src1, DeletionPolicy: events.DeletionCascade}}
	if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	pub.evs = nil

	cr.Generation, cr.Spec.Source, cr.Spec.Enforcements = 2, src2, twoEnforcements()[:1]
	if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range pub.evs {
		s := intentSummary(ev)
		if in, ok := ev.(*events.InstallIntent); ok {
			s += " replacing " + in.Cluster.Replaces
		}
		got = append(got, s)
	}
	slices.Sort(got)
	want := []string{"install a guestbook replacing static:enforcement/cm1/a", "uninstall a helm-guestbook EnforcementRemoved"}
	if !slices.Equal(got, want) {
		t.Errorf("intents of the edit:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	pairs := e.pairs["ns/fleet"]
	if p := pairs[clusterID(ref2.ID, "a")]; len(pairs) != 1 || p == nil || len(p.Enforcements) != 1 || p.Cluster.Identity != "static:enforcement/cm2/a" {
		t.Errorf("pairs after the edit: %+v; want the cm2 cluster's only, with guestbook", pairs)
	}
	if cid := e.pairByName["ns/fleet\x00a"]; cid != clusterID(ref2.ID, "a") {
		t.Errorf("the name a points at pair %q, want the cm2 cluster's", cid)
	}
}
