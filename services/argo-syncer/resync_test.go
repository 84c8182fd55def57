package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// resync runs one resync round and fails the test on a round error.
func (h *harness) resync(round string) ResyncResult {
	h.t.Helper()
	res, err := h.handler.Resync(context.Background(), round)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// restored matches the outcome a resync round publishes for an intent.
func restored(intentID, round string) func(events.Event) bool {
	return func(e events.Event) bool {
		switch o := e.(type) {
		case *events.InstallSucceeded:
			return o.IntentID == intentID && o.Restored == round
		case *events.UninstallDone:
			return o.IntentID == intentID && o.Restored == round
		}
		return false
	}
}

// cacheSees waits until argo-syncer's informers show cond, so that a resync round decides from
// what the test did by hand.
func (h *harness) cacheSees(what string, cond func(s *Syncer) bool) {
	h.t.Helper()
	eventually(h.t.(*testing.T), what, func() bool { return cond(h.syncer) })
}

// Objects deleted or edited by hand come back at the next resync round, without firing any
// trigger: an Application, its AppProject and cluster Secret deleted; another Application's
// path edited; a third, whose beforeInstall trigger let it through, deleted. The outcomes say
// Restored and never Created; nothing waits for a trigger again. A second round writes nothing.
func TestResyncRestoresWhatWasDeletedOrEditedByHand(t *testing.T) {
	h := newHarness(t)
	h.consume()
	ctx := context.Background()
	apps := h.argo.ArgoprojV1alpha1().Applications(h.ns)

	gone := h.installIntent("baseline", "c1", "agent")
	edited := h.installIntent("baseline", "c2", "agent")
	h.publish(gone, edited)
	h.outcome(succeeded(gone.ID()))
	h.outcome(succeeded(edited.ID()))
	hooked := h.waitingIntent("baseline", "c3", "agent")
	seq := h.waitingSequence(hooked)
	h.publish(delivered(hooked, "dlv-1", seq))
	h.outcome(succeeded(hooked.ID()))

	for _, err := range []error{
		apps.Delete(ctx, "c1-agent", metav1.DeleteOptions{}),
		h.argo.ArgoprojV1alpha1().AppProjects(h.ns).Delete(ctx, "c1", metav1.DeleteOptions{}),
		h.kube.CoreV1().Secrets(h.ns).Delete(ctx, "cluster-c1", metav1.DeleteOptions{}),
		apps.Delete(ctx, "c3-agent", metav1.DeleteOptions{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	byHand, err := apps.Patch(ctx, "c2-agent", types.MergePatchType, []byte(`{"spec":{"source":{"path":"by-hand"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.cacheSees("the deletions and the edit", func(s *Syncer) bool {
		_, app1, _ := s.apps.get("c1-agent")
		_, app3, _ := s.apps.get("c3-agent")
		_, project, _ := s.projects.get("c1")
		_, secret, _ := s.secrets.get("cluster-c1")
		app2, _, _ := s.apps.get("c2-agent")
		return !app1 && !app3 && !project && !secret && app2 != nil && app2.SpecDigest == digestSpec(byHand.Spec)
	})

	if res := h.resync("round-1"); res.Restored != 3 || res.Failed != 0 {
		t.Fatalf("round 1: %+v, want 3 restored", res)
	}
	for _, in := range []*events.InstallIntent{gone, edited, hooked} {
		o := h.outcome(restored(in.ID(), "round-1")).(*events.InstallSucceeded)
		if o.Created {
			t.Errorf("%s: restore reported Created (the afterInstall moment)", in.Cluster.Name)
		}
	}
	if h.app("c1-agent") == nil || h.project("c1") == nil || h.secret("cluster-c1") == nil || h.app("c3-agent") == nil {
		t.Fatal("deleted objects were not restored")
	}
	if p := h.app("c2-agent").Spec.Source.Path; p != "charts/agent" {
		t.Errorf("edited path is %q after the resync, want charts/agent", p)
	}
	h.noOutcome(300*time.Millisecond, gated(hooked.ID()))

	h.cacheSees("the restored objects", func(s *Syncer) bool {
		_, ok, _ := s.apps.get("c3-agent")
		return ok
	})
	mark := h.log.mark()
	if res := h.resync("round-2"); res.Restored != 0 || res.Records != 3 {
		t.Fatalf("round 2: %+v, want 3 records and nothing restored", res)
	}
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Errorf("a round with nothing to restore wrote %d times: %+v", len(w), w)
	}
}

// An install lost to an outage longer than the retries (its source Secret was missing until
// after the intent became a dead letter) is carried out by the next resync round.
func TestResyncRestoresAnInstallLostToAnOutage(t *testing.T) {
	h := newHarness(t)
	h.consume()
	in := h.installIntent("baseline", "c1", "agent")
	in.Cluster.Source.SecretName = "late"
	h.publish(in)
	h.deadLetter(in.ID())
	if h.app("c1-agent") != nil {
		t.Fatal("installed without credentials")
	}
	h.copySecret("rancher", "late")
	if res := h.resync("round-1"); res.Restored != 1 {
		t.Fatalf("resync: %+v, want 1 restored", res)
	}
	h.outcome(restored(in.ID(), "round-1"))
	if h.app("c1-agent") == nil || h.secret("cluster-c1") == nil {
		t.Fatal("the lost install was not restored")
	}
}

// What no rule wants any more is never put back, and what comes back by hand after an uninstall
// is removed again: an uninstalled Application stays gone, an install waiting for its
// beforeInstall trigger is not created behind the trigger, and an uninstalled Application that
// reappears (restored from a backup, say) is deleted by the resync.
func TestResyncNeverRecreatesWhatNoRuleWants(t *testing.T) {
	h := newHarness(t)
	h.consume()
	removed := h.installIntent("baseline", "c1", "agent")
	restoredByHand := h.installIntent("baseline", "c2", "agent")
	h.publish(removed, restoredByHand)
	h.outcome(succeeded(removed.ID()))
	h.outcome(succeeded(restoredByHand.ID()))
	backup := h.app("c2-agent")
	un1, un2 := uninstallIntent(removed, events.UninstallNoLongerMatches), uninstallIntent(restoredByHand, events.UninstallNoLongerMatches)
	h.publish(un1, un2)
	h.outcome(uninstalled(un1.ID()))
	h.outcome(uninstalled(un2.ID()))
	backup.ResourceVersion, backup.UID, backup.CreationTimestamp = "", "", metav1.Time{}
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Create(context.Background(), backup, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting := h.waitingIntent("baseline", "c3", "agent")
	h.cacheSees("the uninstall and the Application restored by hand", func(s *Syncer) bool {
		_, app1, _ := s.apps.get("c1-agent")
		_, app2, _ := s.apps.get("c2-agent")
		return !app1 && app2
	})

	if res := h.resync("round-1"); res.Restored != 1 || res.Failed != 0 {
		t.Fatalf("resync: %+v, want only the reappeared Application's uninstall", res)
	}
	h.outcome(restored(un2.ID(), "round-1"))
	if h.app("c1-agent") != nil {
		t.Error("the resync recreated an uninstalled Application")
	}
	if h.app("c3-agent") != nil {
		t.Error("the resync created an Application still waiting for its beforeInstall trigger")
	}
	if app := h.app("c2-agent"); app != nil && app.DeletionTimestamp == nil {
		t.Error("the uninstalled Application restored by hand is still there")
	}
	if w := h.waiting(waiting); w != waiting.ID() {
		t.Errorf("waiting install is %q, want %s", w, waiting.ID())
	}
}

// waitingSequence is the decision sequence of the install waiting for in's Application.
func (h *harness) waitingSequence(in *events.InstallIntent) uint64 {
	h.t.Helper()
	e, _, err := h.gates.get(context.Background(), gateKey(in.Rule, events.ApplicationName(in.Cluster.Name, in.Enforcement.Name)))
	if err != nil || e == nil {
		h.t.Fatalf("no install waiting for %s: %v", in.ID(), err)
	}
	return e.IntentSequence
}

// copySecret creates Secret to in the operator namespace with the data of Secret from.
func (h *harness) copySecret(from, to string) {
	h.t.Helper()
	ctx := context.Background()
	src, err := h.kube.CoreV1().Secrets(h.opNS).Get(ctx, from, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	dst := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: to, Namespace: h.opNS}, Data: src.Data}
	if _, err := h.kube.CoreV1().Secrets(h.opNS).Create(ctx, dst, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}
