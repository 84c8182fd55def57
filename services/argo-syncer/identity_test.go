package main

import (
	"context"
	"strings"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// eksProd is rule's install intent of enforcement for an EKS cluster named prod in region: the
// name is the same in every region, the ARN (and so the identity) and the inventory revision
// (which intent ids contain) are not.
func (h *harness) eksProd(rule, enforcement, region string) *events.InstallIntent {
	in := h.eksIntent("prod")
	if region != "eu-west-1" {
		in.Cluster.Revision = 2
	}
	in.Rule.Name, in.Rule.UID = rule, "uid-"+rule
	in.Enforcement.Name, in.Enforcement.Repo = enforcement, "https://git.example/"+enforcement
	in.Cluster.URL = "https://PROD.gr7." + region + ".eks.amazonaws.com"
	in.Cluster.Key = "arn:aws:eks:" + region + ":111122223333:cluster/prod"
	in.Cluster.Identity = "eks:" + in.Cluster.Key
	return in
}

// nameConflict waits for the outcome of in, failing the test unless it is a permanent
// NameConflict whose message names both identities.
func (h *harness) nameConflict(in *events.InstallIntent, owner string) {
	h.t.Helper()
	f, isFailed := h.outcome(func(e events.Event) bool { return failed(in.ID())(e) || succeeded(in.ID())(e) }).(*events.InstallFailed)
	if !isFailed {
		h.t.Fatalf("install of %s on %s succeeded on cluster prod, which %s has; want %s", in.Enforcement.Name, in.Cluster.Identity, owner, ReasonNameConflict)
	}
	if f.Reason != ReasonNameConflict || !f.Permanent || !strings.Contains(f.Message, owner) || !strings.Contains(f.Message, in.Cluster.Identity) {
		h.t.Errorf("install of %s on %s failed with %s (permanent %v): %s; want a permanent %s naming %s and %s",
			in.Enforcement.Name, in.Cluster.Identity, f.Reason, f.Permanent, f.Message, ReasonNameConflict, owner, in.Cluster.Identity)
	}
}

// checkOwner fails the test unless the cluster Secret, AppProject and Application app of cluster
// prod record owner and the Secret's server is url.
func (h *harness) checkOwner(owner, url string, apps ...string) {
	h.t.Helper()
	sec, p := h.secret("cluster-prod"), h.project("prod")
	if sec == nil || p == nil {
		h.t.Fatalf("cluster Secret %v or AppProject %v of prod missing", sec != nil, p != nil)
	}
	if got := sec.Annotations[AnnotationIdentity]; got != owner || string(sec.Data["server"]) != url {
		h.t.Errorf("cluster Secret of prod: identity %q server %q; want %q, %q", got, sec.Data["server"], owner, url)
	}
	if got := p.Annotations[AnnotationIdentity]; got != owner || p.Spec.Destinations[0].Server != url {
		h.t.Errorf("AppProject prod: identity %q destinations %+v; want %q, %q", got, p.Spec.Destinations, owner, url)
	}
	for _, name := range apps {
		a := h.app(name)
		if a == nil {
			h.t.Errorf("Application %s missing", name)
			continue
		}
		if got := a.Annotations[AnnotationIdentity]; got != owner {
			h.t.Errorf("Application %s: identity %q; want %q", name, got, owner)
		}
	}
}

// TestSameNameOtherClusterIsNameConflict: two EKS clusters named prod in two regions. The first
// gets its cluster Secret, AppProject and Application, each recording its ARN; every install
// for the second (the same rule and enforcement, or another rule's) fails permanently with
// NameConflict naming both identities, writes nothing, and never moves the Secret's server to
// the second URL; its uninstall removes nothing of the first's; other intents carry on.
func TestSameNameOtherClusterIsNameConflict(t *testing.T) {
	h := newHarness(t)
	h.consume()
	eu := h.eksProd("baseline", "agent", "eu-west-1")
	euURL, euID := eu.Cluster.URL, eu.Cluster.Identity
	h.publish(eu)
	h.outcome(succeeded(eu.ID()))
	h.checkOwner(euID, euURL, "prod-agent")

	us := h.eksProd("baseline", "agent", "us-east-1")
	usOther := h.eksProd("other", "monitoring", "us-east-1")
	h.publish(us, usOther)
	h.nameConflict(us, euID)
	h.nameConflict(usOther, euID)
	if a := h.app("prod-monitoring"); a != nil {
		t.Errorf("Application prod-monitoring was created for the second prod: %+v", a.Annotations)
	}
	h.checkOwner(euID, euURL, "prod-agent")

	// Uninstalls of the second prod (its rule let go, its source dropped it) remove nothing.
	gone := uninstallIntent(us, events.UninstallClusterGone)
	gone.Cluster.Gone = true
	h.publish(gone, uninstallIntent(usOther, events.UninstallRuleDeleted))
	if d := h.outcome(uninstalled(gone.ID())).(*events.UninstallDone); d.Deleted {
		t.Errorf("uninstall of the second prod reports a deletion")
	}
	h.checkOwner(euID, euURL, "prod-agent")

	// The first prod and other clusters carry on.
	euNext := h.eksProd("other", "monitoring", "eu-west-1")
	stage := h.eksIntent("stage")
	h.publish(euNext, stage)
	h.outcome(succeeded(euNext.ID()))
	h.outcome(succeeded(stage.ID()))
	h.checkOwner(euID, euURL, "prod-agent", "prod-monitoring")
}

// TestUnidentifiedObjectsAreClaimedByTheFirstIdentity: objects written for an intent without an
// identity (an older producer, or before identities existed) are claimed by the first identity
// that installs on them (the Secret annotated, its server moved as before); from then on another
// identity gets NameConflict, while intents without an identity keep today's behaviour.
func TestUnidentifiedObjectsAreClaimedByTheFirstIdentity(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	old := h.eksProd("baseline", "agent", "eu-west-1")
	old.Cluster.Identity = ""
	if _, err := h.syncer.Install(ctx, old, true); err != nil {
		t.Fatal(err)
	}
	h.checkOwner("", old.Cluster.URL, "prod-agent")

	us := h.eksProd("baseline", "agent", "us-east-1")
	if _, err := h.syncer.Install(ctx, us, true); err != nil {
		t.Fatalf("first identity on unidentified objects: %v", err)
	}
	h.checkOwner(us.Cluster.Identity, us.Cluster.URL, "prod-agent")

	eu := h.eksProd("baseline", "agent", "eu-west-1")
	_, err := h.syncer.Install(ctx, eu, true)
	var f *failure
	if !errorsAs(err, &f) || f.reason != ReasonNameConflict || !f.permanent {
		t.Fatalf("second identity: %v; want a permanent %s", err, ReasonNameConflict)
	}
	h.checkOwner(us.Cluster.Identity, us.Cluster.URL, "prod-agent")

	unidentified := h.eksProd("baseline", "monitoring", "us-east-1")
	unidentified.Cluster.Identity = ""
	if _, err := h.syncer.Install(ctx, unidentified, true); err != nil {
		t.Fatalf("install without an identity: %v", err)
	}
}
