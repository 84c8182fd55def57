package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// staticProd is rule's install intent of enforcement on cluster prod as the static ConfigMap cm
// lists it (identity static:enforcement/<cm>/prod), at rule generation.
func (h *harness) staticProd(rule, enforcement, cm string, generation int64) *events.InstallIntent {
	in := h.installIntent(rule, "prod", enforcement)
	in.Rule.UID, in.Rule.Generation = "uid-"+rule, generation
	in.Cluster.Identity = "static:enforcement/" + cm + "/prod"
	in.Cluster.URL = "https://prod." + cm + ".example:6443"
	return in
}

// handover is the intent rule-engine sends when rule's pair on prod moves from ConfigMap cm1 to
// cm2 (a renamed static ConfigMap): the new identity and URL, replacing the old identity, with a
// beforeInstall trigger that a creation would have to wait for.
func (h *harness) handover(rule, enforcement string, revision uint64) *events.InstallIntent {
	in := h.staticProd(rule, enforcement, "cm2", 2)
	in.Cluster.Replaces, in.Cluster.Revision = "static:enforcement/cm1/prod", revision
	in.Triggers = &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: "http://hooks.example/before", TimeoutSeconds: 5, FailurePolicy: "Fail"}}
	return in
}

// TestSourceHandoverUpdatesInPlace: a rule whose static ConfigMap was renamed hands its cluster
// prod over to the new source's prod (another identity, another URL). While another rule still
// has an Application on the old prod, the takeover is a NameConflict (two clusters want the
// name). Once that one is gone, the handover intents update the same Applications in place
// (same UID, Created false, no InstallGated: no second beforeInstall), and the cluster Secret
// and AppProject move to the new identity and URL. A real clash, another prod claiming to
// replace an identity the objects do not record, still gets NameConflict and changes nothing.
func TestSourceHandoverUpdatesInPlace(t *testing.T) {
	h := newHarness(t)
	h.consume()
	agent, monitoring := h.staticProd("baseline", "agent", "cm1", 1), h.staticProd("baseline", "monitoring", "cm1", 1)
	logging := h.staticProd("other", "logging", "cm1", 1)
	h.publish(agent, monitoring, logging)
	for _, in := range []*events.InstallIntent{agent, monitoring, logging} {
		h.outcome(succeeded(in.ID()))
	}
	oldID, oldURL := agent.Cluster.Identity, agent.Cluster.URL
	h.checkOwner(oldID, oldURL, "prod-agent", "prod-monitoring", "prod-logging")
	uids := map[string]string{}
	for _, name := range []string{"prod-agent", "prod-monitoring"} {
		uids[name] = string(h.app(name).UID)
	}

	early := h.handover("baseline", "agent", 2)
	h.publish(early)
	f := h.outcome(failed(early.ID())).(*events.InstallFailed)
	if f.Reason != ReasonNameConflict || !strings.Contains(f.Message, "rule team/other") {
		t.Fatalf("handover while rule other installs on the old prod: %s %q; want %s naming rule team/other", f.Reason, f.Message, ReasonNameConflict)
	}
	h.checkOwner(oldID, oldURL, "prod-agent", "prod-monitoring", "prod-logging")

	gone := uninstallIntent(logging, events.UninstallRuleDeleted)
	h.publish(gone)
	h.outcome(uninstalled(gone.ID()))
	nextAgent, nextMonitoring := h.handover("baseline", "agent", 3), h.handover("baseline", "monitoring", 3)
	h.publish(nextAgent, nextMonitoring)
	for _, in := range []*events.InstallIntent{nextAgent, nextMonitoring} {
		s := h.outcome(func(e events.Event) bool { return succeeded(in.ID())(e) || failed(in.ID())(e) })
		if ok, _ := s.(*events.InstallSucceeded); ok == nil || ok.Created {
			t.Fatalf("handover install of %s: %+v; want an update of the existing Application", in.Enforcement.Name, s)
		}
	}
	h.noOutcome(300*time.Millisecond, func(e events.Event) bool { _, ok := e.(*events.InstallGated); return ok })
	newID, newURL := nextAgent.Cluster.Identity, nextAgent.Cluster.URL
	h.checkOwner(newID, newURL, "prod-agent", "prod-monitoring")
	for name, uid := range uids {
		if got := string(h.app(name).UID); got != uid {
			t.Errorf("Application %s was recreated (uid %s, was %s)", name, got, uid)
		}
	}

	clash := h.staticProd("baseline", "agent", "cm9", 3)
	clash.Cluster.Replaces = "static:enforcement/cm7/prod"
	h.publish(clash)
	h.nameConflict(clash, newID)
	h.checkOwner(newID, newURL, "prod-agent", "prod-monitoring")
}

// TestChangedSecretNameRefreshesCredentialsInPlace: a rule whose secretName changes (same
// Rancher, so the same cluster identity: rule-engine sends the pair's intents again, referencing
// the new Secret) gets the cluster Secret's credentials refreshed in place: same Secret (UID),
// same server, the new token and the new reference recorded; the Application is not recreated
// and no trigger waits. The same intent again writes nothing, and neither does the resync.
func TestChangedSecretNameRefreshesCredentialsInPlace(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, err := h.kube.CoreV1().Secrets(h.opNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rancher-ops", Namespace: h.opNS},
		Data:       map[string][]byte{"url": []byte("https://rancher.example"), "token": []byte("token-0ps")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.consume()
	first := h.installIntent("baseline", "prod", "agent")
	first.Cluster.Identity = "rancher:https://rancher.example/c-prod"
	h.publish(first)
	h.outcome(succeeded(first.ID()))
	sec, app := h.secret(ClusterSecretName("prod")), h.app("prod-agent")
	if got := h.clusterConfigJSON("prod")["bearerToken"]; got != "token-s3cr3t" || sec.Annotations[AnnotationCredentials] != h.opNS+"/rancher" {
		t.Fatalf("registered with token %v, credentials from %q; want the rancher Secret's", got, sec.Annotations[AnnotationCredentials])
	}

	moved := h.installIntent("baseline", "prod", "agent")
	moved.Cluster.Identity, moved.Rule.Generation = first.Cluster.Identity, first.Rule.Generation+1
	moved.Cluster.Source.ID, moved.Cluster.Source.SecretName = "src2", "rancher-ops"
	moved.Triggers = &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: "http://hooks.example/before", TimeoutSeconds: 5}}
	h.publish(moved)
	if s := h.outcome(succeeded(moved.ID())).(*events.InstallSucceeded); s.Created {
		t.Errorf("install with the new Secret created the Application; want an update")
	}
	after := h.secret(ClusterSecretName("prod"))
	if got := h.clusterConfigJSON("prod")["bearerToken"]; got != "token-0ps" {
		t.Errorf("cluster Secret's token after the secretName change: %v, want token-0ps", got)
	}
	if after.UID != sec.UID || string(after.Data["server"]) != string(sec.Data["server"]) ||
		after.Annotations[AnnotationCredentials] != h.opNS+"/rancher-ops" || after.Annotations[AnnotationIdentity] != first.Cluster.Identity {
		t.Errorf("cluster Secret after the change: uid %s (was %s), server %s (was %s), annotations %v",
			after.UID, sec.UID, after.Data["server"], sec.Data["server"], after.Annotations)
	}
	if got := h.app("prod-agent"); got.UID != app.UID {
		t.Errorf("Application recreated: uid %s, was %s", got.UID, app.UID)
	}
	h.noOutcome(300*time.Millisecond, func(e events.Event) bool { _, ok := e.(*events.InstallGated); return ok })

	mark := h.log.mark()
	h.handle(moved)
	if _, err := h.syncer.Restore(ctx, first, true, func(context.Context) (bool, error) { return true, nil }); err != nil {
		t.Fatal(err)
	}
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Errorf("the same intent again, then the resync of the older one: %d writes (%v); want none", len(w), w)
	}
	if got := h.clusterConfigJSON("prod")["bearerToken"]; got != "token-0ps" {
		t.Errorf("token after the resync: %v, want token-0ps (the resync leaves credentials alone)", got)
	}
}
