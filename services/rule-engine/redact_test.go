package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestIntentTriggersCarryRedactedEndpoints: a webhook endpoint with a token in its user
// information or query reaches intents redacted and marked, so that trigger-dispatcher reads the
// full endpoint from the rule; one without credentials is carried as written; a malformed one is
// not echoed.
func TestIntentTriggersCarryRedactedEndpoints(t *testing.T) {
	const canary = "CANARY-hook-7c1e"
	cr := &v1beta1.ClusterRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "hooks", UID: "u", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{
			Enforcements: []v1beta1.Enforcement{{Name: "a", Repo: "r"}},
			Source:       v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
			Triggers: &v1beta1.Triggers{
				BeforeInstall: &v1beta1.Trigger{Endpoint: "https://bot:" + canary + "@hooks.example/before?token=" + canary},
				AfterInstall:  &v1beta1.Trigger{Endpoint: "https://hooks.example/after"},
			},
		},
	}
	r := ruleFromSpec(cr, "enforcement")
	before, after := r.triggers.BeforeInstall, r.triggers.AfterInstall
	if before.Endpoint != "https://redacted@hooks.example/before?token=redacted" || !before.EndpointRedacted {
		t.Errorf("beforeInstall = %+v, want the redacted endpoint, marked", before)
	}
	if after.Endpoint != "https://hooks.example/after" || after.EndpointRedacted {
		t.Errorf("afterInstall = %+v, want the endpoint as written, not marked", after)
	}
	cr.Spec.Triggers.AfterInstall.Endpoint = "https://hooks example/?token=" + canary + "\x7f"
	if got := ruleFromSpec(cr, "enforcement").triggers.AfterInstall; got.Endpoint != events.InvalidURL || got.EndpointRedacted {
		t.Errorf("malformed endpoint = %+v, want %q, not marked", got, events.InvalidURL)
	}
}

// TestRequestsGetErrorsRedactTheURL: a failing requests.get names its URL redacted in the error
// (which becomes the rule's TemplateError status), for a refused host and a failed call alike.
func TestRequestsGetErrorsRedactTheURL(t *testing.T) {
	const canary = "CANARY-tpl-93ab"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		_ = conn.Close() // the call fails without an answer
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := cluster("x", nil)
	for _, target := range []string{
		"http://" + canary + "@" + u.Host + "/x?token=" + canary, // allowed, fails
		"http://other.example/x?token=" + canary,                 // not allowed
	} {
		enf := []v1beta1.Enforcement{{Name: "a", Repo: "${{ requests.get('" + target + "').text }}"}}
		r := newRenderer([]string{u.Hostname()}, time.Second)
		r.useEgress(loopbackOpen)
		_, err := r.render(context.Background(), compile(enf), templateVars(&c))
		if err == nil || strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), "token=redacted") {
			t.Errorf("requests.get(%s): error = %v, want one naming the redacted URL only", target, err)
		}
	}
}
