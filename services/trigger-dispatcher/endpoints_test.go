package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
)

// rule writes the ClusterRule "baseline" of the harness's rule namespace (the one its intents
// name) with a beforeInstall trigger calling endpoint, creating or replacing it.
func (h *harness) rule(endpoint string) {
	h.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "enforcement.globo.com/v1beta1", "kind": "ClusterRule",
		"metadata": map[string]any{"namespace": h.ruleNS, "name": "baseline"},
		"spec": map[string]any{
			"enforcements": []any{map[string]any{"name": "logging", "repo": "https://git.example.com/logging.git"}},
			"source":       map[string]any{"rancher": map[string]any{}},
			"triggers":     map[string]any{"beforeInstall": map[string]any{"endpoint": endpoint}},
		},
	}}
	ctx := context.Background()
	old := u.DeepCopy()
	if err := h.kube.Client.Get(ctx, types.NamespacedName{Namespace: h.ruleNS, Name: "baseline"}, old); err == nil {
		u.SetResourceVersion(old.GetResourceVersion())
		if err := h.kube.Client.Update(ctx, u); err != nil {
			h.t.Fatal(err)
		}
		return
	}
	if err := h.kube.Client.Create(ctx, u); err != nil {
		h.t.Fatal(err)
	}
}

// TestEndpointCredentialsAreReadFromTheRule: an intent carries a webhook endpoint redacted, as
// rule-engine publishes it; the dispatcher calls the rule's full endpoint (user information and
// query token included) and stores, publishes and logs none of it. A rule whose endpoint
// changed, or a deleted rule, fails the delivery with a message that names the redacted endpoint
// only, without a call.
func TestEndpointCredentialsAreReadFromTheRule(t *testing.T) {
	const canary = "CANARY-dispatcher-5d2f"
	h := newHarness(t)
	var mu sync.Mutex
	var got []string
	rc := newReceiver(t)
	rc.onCall = func(r *http.Request, _ []byte) {
		user, pass, _ := r.BasicAuth()
		mu.Lock()
		got = append(got, user+":"+pass+" "+r.URL.Query().Get("token"))
		mu.Unlock()
	}
	full := strings.Replace(rc.URL(), "http://", "http://bot:"+canary+"@", 1) + "/hook?token=" + canary
	h.rule(full)
	s := startService(t, h.env())
	redacted := &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: events.RedactURL(full), EndpointRedacted: true, TimeoutSeconds: 5}}

	in := h.intent("c1", "h1", redacted)
	h.gated(in)
	if _, ok := h.waitOutcome(events.PhaseBeforeInstall, in.ID()).(*events.TriggerDelivered); !ok {
		t.Fatalf("delivery with a redacted endpoint not delivered\nlogs:\n%s", s.logs)
	}
	mu.Lock()
	if len(got) != 1 || got[0] != "bot:"+canary+" "+canary {
		t.Errorf("receiver got %q, want the rule's user information and query token", got)
	}
	mu.Unlock()

	h.rule(strings.Replace(full, "/hook", "/other", 1))
	moved := h.intent("c2", "h1", redacted)
	h.gated(moved)
	f, ok := h.waitOutcome(events.PhaseBeforeInstall, moved.ID()).(*events.TriggerFailed)
	if !ok || !strings.Contains(f.Message, "no longer has the beforeInstall endpoint") {
		t.Errorf("outcome after the rule's endpoint changed = %+v, want TriggerFailed saying so", f)
	}
	if err := h.kube.Client.Delete(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "enforcement.globo.com/v1beta1", "kind": "ClusterRule",
		"metadata": map[string]any{"namespace": h.ruleNS, "name": "baseline"}}}); err != nil {
		t.Fatal(err)
	}
	gone := h.intent("c3", "h1", redacted)
	h.gated(gone)
	f, ok = h.waitOutcome(events.PhaseBeforeInstall, gone.ID()).(*events.TriggerFailed)
	if !ok || !strings.Contains(f.Message, "not found") {
		t.Errorf("outcome after the rule was deleted = %+v, want TriggerFailed saying so", f)
	}
	if n := len(rc.Calls()); n != 1 {
		t.Errorf("receiver called %d times, want 1 (no call to an endpoint the rule no longer has)", n)
	}

	h.caughtUp()
	if where := eventstest.Occurrences(t, h.js, canary); len(where) > 0 {
		t.Errorf("the endpoint's credentials are stored in %v", where)
	}
	if strings.Contains(s.logs.String(), canary) {
		t.Errorf("the endpoint's credentials are in the logs:\n%s", s.logs)
	}
	if m := scrape(t, s.metrics); strings.Contains(m, canary) {
		t.Error("the endpoint's credentials are on the metrics page")
	}
}
