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
// the old identity, one uninstall of the dropped one (EnforcementRemoved), nothing else; the old
// pair keeps the kept enforcement, handed over, until argo-syncer's install.succeeded confirms
// the takeover, and then the engine keeps one pair, the new cluster's.
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
		if err := e.applyCluster(ctx, staticCluster(l.ref, l.cm, "a"), 1, 0); err != nil {
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
	// The cm1 pair stays, handed over, until argo-syncer confirms the takeover.
	newID, oldID := clusterID(ref2.ID, "a"), clusterID(ref1.ID, "a")
	pairs := e.pairs["ns/fleet"]
	if p, old := pairs[newID], pairs[oldID]; len(pairs) != 2 || p == nil || len(p.Enforcements) != 1 || p.Cluster.Value().Identity != "static:enforcement/cm2/a" ||
		old == nil || old.handedOverTo() != newID || len(old.Enforcements) != 1 || old.Enforcements.get("guestbook") == nil {
		t.Errorf("pairs after the edit: %+v; want the cm2 cluster's with guestbook, and cm1's with guestbook handed over to it", pairs)
	}
	if got := e.pairsNamed("ns/fleet", "a"); !slices.Equal(got, []string{newID, oldID}) && !slices.Equal(got, []string{oldID, newID}) {
		t.Errorf("the name a points at pairs %q, want both", got)
	}
	checkTally(t, e, "ns/fleet", "after the edit") // the handed-over pair counts for nothing
	takeover := pub.evs[slices.IndexFunc(pub.evs, func(ev events.Event) bool { _, ok := ev.(*events.InstallIntent); return ok })].(*events.InstallIntent)
	if err := e.applyOutcome(ctx, &events.InstallSucceeded{IntentID: takeover.ID(), Rule: takeover.Rule, Cluster: "a",
		Enforcement: "guestbook", SpecHash: takeover.SpecHash}, events.Meta{}); err != nil {
		t.Fatal(err)
	}
	if p := e.pairs["ns/fleet"][newID]; len(e.pairs["ns/fleet"]) != 1 || p == nil || !p.Enforcements.get("guestbook").Installed {
		t.Errorf("pairs after the takeover was confirmed: %+v; want the cm2 cluster's only, installed", e.pairs["ns/fleet"])
	}
	if got := e.pairsNamed("ns/fleet", "a"); !slices.Equal(got, []string{newID}) {
		t.Errorf("the name a points at pairs %q, want the cm2 cluster's", got)
	}
	checkTally(t, e, "ns/fleet", "after the takeover was confirmed")
}

// installedOutcome is argo-syncer's install.succeeded for an install intent (an update: not created).
func installedOutcome(in *events.InstallIntent) *events.InstallSucceeded {
	return &events.InstallSucceeded{IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name,
		Application: in.Cluster.Name + "-" + in.Enforcement.Name, SpecHash: in.SpecHash}
}

// installsOf returns the install intents among evs.
func installsOf(evs []events.Event) []*events.InstallIntent {
	var out []*events.InstallIntent
	for _, ev := range evs {
		if in, ok := ev.(*events.InstallIntent); ok {
			out = append(out, in)
		}
	}
	return out
}

// TestRefusedTakeoverOrphansNothing: a rule over the static ConfigMap cm1 (clusters a and b,
// installed) moves to cm2, which lists a and b again under new identities. argo-syncer refuses
// a's takeover (NameConflict: another rule still installs on the old a) and confirms b's. The
// old a pair stays known: the rule shows NameConflict, and deleting the rule uninstalls a's
// Application on the old identity too, where argo-syncer's objects still are. b's old pair let
// go once its takeover was confirmed: b is uninstalled once, on its new identity.
func TestRefusedTakeoverOrphansNothing(t *testing.T) {
	e := newEnv(t)
	e.start()
	src1, ref1 := staticSourceOf("cm1")
	src2, ref2 := staticSourceOf("cm2")
	e.publish(appeared(staticCluster(ref1, "cm1", "a"), 1), appeared(staticCluster(ref1, "cm1", "b"), 2),
		&events.SourceListed{Source: ref1, Scan: 1, Known: 2})
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1], Source: src1, DeletionPolicy: events.DeletionCascade})
	for _, in := range installsOf(e.waitIntentSet("install a guestbook", "install b guestbook")) {
		e.publish(installedOutcome(in))
	}
	e.waitReady("fleet", v1beta1.ReasonInstalled, nil)

	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) { cr.Spec.Source = src2 })
	e.publish(appeared(staticCluster(ref2, "cm2", "a"), 1), appeared(staticCluster(ref2, "cm2", "b"), 2),
		&events.SourceListed{Source: ref2, Scan: 1, Known: 2})
	takeovers := installsOf(e.waitIntentSet("install a guestbook", "install b guestbook", "install a guestbook", "install b guestbook"))[2:]
	for _, in := range takeovers {
		if in.Cluster.Replaces != "static:enforcement/cm1/"+in.Cluster.Name {
			t.Fatalf("takeover of %s replaces %q", in.Cluster.Name, in.Cluster.Replaces)
		}
		if in.Cluster.Name == "b" {
			e.publish(installedOutcome(in))
			continue
		}
		e.publish(&events.InstallFailed{IntentID: in.ID(), Rule: in.Rule, Cluster: "a", Enforcement: "guestbook", Application: "a-guestbook",
			Reason: v1beta1.ReasonNameConflict, Permanent: true,
			Message: "cluster name a: rule ns/fleet hands it over from cluster static:enforcement/cm1/a to cluster static:enforcement/cm2/a, but application a-logging of rule ns/other still installs on static:enforcement/cm1/a"})
	}
	e.waitReady("fleet", v1beta1.ReasonNameConflict, func(st v1beta1.ClusterRuleStatus) error {
		if st.InstalledApplications != 1 || st.InstallErrorCount != 1 {
			return fmt.Errorf("installed %d, errors %d; want 1 (b) and 1 (a refused)", st.InstalledApplications, st.InstallErrorCount)
		}
		return nil
	})

	e.deleteRule("fleet")
	e.waitRuleGone("fleet")
	got := e.waitIntentSet("install a guestbook", "install b guestbook", "install a guestbook", "install b guestbook",
		"uninstall a guestbook RuleDeleted", "uninstall a guestbook RuleDeleted", "uninstall b guestbook RuleDeleted")
	var uninstalled []string
	for _, ev := range got {
		if un, ok := ev.(*events.UninstallIntent); ok {
			uninstalled = append(uninstalled, un.Cluster.Identity+" "+un.DeletionPolicy)
		}
	}
	slices.Sort(uninstalled)
	want := []string{"static:enforcement/cm1/a Cascade", "static:enforcement/cm2/a Cascade", "static:enforcement/cm2/b Cascade"}
	if !slices.Equal(uninstalled, want) {
		t.Errorf("uninstalls of the deleted rule:\n%s\nwant:\n%s", strings.Join(uninstalled, "\n"), strings.Join(want, "\n"))
	}
}

// TestSameNamedOldPairsAreEachHandedOver: a rancher source lists two clusters named prod (two
// ids, two identities). Both pairs are tracked: each install outcome reaches its own pair
// (Installed, 2 Applications). The rule's secretName changes (same Rancher, same identities):
// each new prod takes over the old pair of its own identity, and once both takeovers are
// confirmed the old source's pairs are gone: deleting the rule uninstalls the two new pairs only.
func TestSameNamedOldPairsAreEachHandedOver(t *testing.T) {
	e := newEnv(t)
	e.start()
	ref1 := rancherSource()
	ref2 := events.NewSourceRef("rancher", "enforcement", "rancher-ops", nil)
	prod := func(ref events.SourceRef, id string) events.Cluster {
		c := testCluster("prod", norman, true)
		c.Source, c.Key, c.Identity = ref, id, "rancher:https://rancher.example/"+id
		c.URL = "https://rancher.example/k8s/clusters/" + id
		c.Attributes = map[string]any{"id": id}
		return c
	}
	e.publish(appeared(prod(ref1, "c-1"), 1), appeared(prod(ref1, "c-2"), 2), &events.SourceListed{Source: ref1, Scan: 1, Known: 2})
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1], Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	for _, in := range installsOf(e.waitIntentSet("install prod guestbook", "install prod guestbook")) {
		e.publish(installedOutcome(in))
	}
	e.waitReady("fleet", v1beta1.ReasonInstalled, func(st v1beta1.ClusterRuleStatus) error {
		if st.InstalledApplications != 2 {
			return fmt.Errorf("installed %d, want 2", st.InstalledApplications)
		}
		return nil
	})

	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) { cr.Spec.Source.SecretName = "rancher-ops" })
	e.publish(appeared(prod(ref2, "c-1"), 1), appeared(prod(ref2, "c-2"), 2), &events.SourceListed{Source: ref2, Scan: 1, Known: 2})
	takeovers := installsOf(e.waitIntentSet("install prod guestbook", "install prod guestbook", "install prod guestbook", "install prod guestbook"))[2:]
	identities := []string{takeovers[0].Cluster.Identity, takeovers[1].Cluster.Identity}
	slices.Sort(identities)
	if !slices.Equal(identities, []string{"rancher:https://rancher.example/c-1", "rancher:https://rancher.example/c-2"}) {
		t.Fatalf("takeovers for identities %v; want one per prod", identities)
	}
	for _, in := range takeovers {
		if in.Cluster.Replaces != "" || in.Cluster.Source != ref2 {
			t.Errorf("takeover of %s: target %+v; want the new source, nothing replaced", in.Cluster.Identity, in.Cluster)
		}
		e.publish(installedOutcome(in))
	}
	e.waitReady("fleet", v1beta1.ReasonInstalled, func(st v1beta1.ClusterRuleStatus) error {
		if st.InstalledApplications != 2 {
			return fmt.Errorf("installed %d, want 2", st.InstalledApplications)
		}
		return nil
	})

	e.deleteRule("fleet")
	e.waitRuleGone("fleet")
	got := e.waitIntentSet("install prod guestbook", "install prod guestbook", "install prod guestbook", "install prod guestbook",
		"uninstall prod guestbook RuleDeleted", "uninstall prod guestbook RuleDeleted")
	for _, ev := range got {
		if un, ok := ev.(*events.UninstallIntent); ok && un.Cluster.Source != ref2 {
			t.Errorf("uninstall of the deleted rule on %s from source %+v; want only the new source's pairs", un.Cluster.Identity, un.Cluster.Source)
		}
	}
}
