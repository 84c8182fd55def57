package main

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service/egress"
)

func TestLoadConfigDefaults(t *testing.T) {
	c, err := loadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.DefaultTimeout != 5*time.Second || c.MaxTimeout != 30*time.Second || c.MaxAttempts != 5 ||
		c.BackoffBase != 500*time.Millisecond || c.BackoffMax != 30*time.Second || c.BlockedRetryInterval != time.Minute {
		t.Errorf("defaults = %+v", c)
	}
	if c.Egress.Allowed != nil || c.Egress.Denied != nil {
		t.Errorf("network defaults: %+v, want the egress defaults only", c.Egress)
	}
}

// The network variables keep their names: TRIGGER_ALLOWED_NETWORKS opens networks,
// TRIGGER_DENIED_NETWORKS refuses more; "none" no longer switches the default list off.
func TestLoadConfigNetworks(t *testing.T) {
	env := map[string]string{"TRIGGER_ALLOWED_NETWORKS": "10.1.2.3/8, ::1", "TRIGGER_DENIED_NETWORKS": "203.0.113.7"}
	c, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		Denied: []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}}
	if !reflect.DeepEqual(c.Egress, want) {
		t.Errorf("egress = %+v, want %+v", c.Egress, want)
	}
	env["TRIGGER_DENIED_NETWORKS"] = "none"
	if _, err := loadConfig(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "TRIGGER_ALLOWED_NETWORKS") {
		t.Errorf("TRIGGER_DENIED_NETWORKS=none: %v, want an error pointing to TRIGGER_ALLOWED_NETWORKS", err)
	}
}

func TestDeliveryID(t *testing.T) {
	a := deliveryID("install:ns:rule:1:c:3:e:h", events.PhaseBeforeInstall)
	if a != deliveryID("install:ns:rule:1:c:3:e:h", events.PhaseBeforeInstall) {
		t.Error("delivery id is not stable")
	}
	if a == deliveryID("install:ns:rule:1:c:3:e:h", events.PhaseAfterInstall) || a == deliveryID("install:ns:rule:2:c:3:e:h", events.PhaseBeforeInstall) {
		t.Error("delivery ids of different phases or intents collide")
	}
	if !strings.HasPrefix(a, "dlv_") || len(a) != 36 {
		t.Errorf("delivery id %q: want dlv_ and 32 hex digits", a)
	}
}

// The body keeps the original's cluster and enforcement objects, adds rule, phase and the
// delivery id, and carries nothing from the source Secret reference or cluster attributes.
func TestBuildPayload(t *testing.T) {
	in := &events.InstallIntent{
		Rule: events.RuleRef{Namespace: "team", Name: "baseline", Generation: 2},
		Cluster: events.Target{Name: "prod-eu", Key: "c-123", URL: "https://prod-eu.example.com",
			Source: events.SourceRef{Kind: "rancher", ID: "s1", SecretNamespace: "enforcement", SecretName: "rancher"}},
		Enforcement: events.Enforcement{Name: "logging", Repo: "https://git.example.com/logging.git", Path: "chart",
			Namespace: "default", HelmParameters: []events.HelmParameter{{Name: "replicas", Value: "2"}}},
		SpecHash: "h",
	}
	body, err := buildPayload(in, events.PhaseBeforeInstall, "dlv_1")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"cluster": map[string]any{"name": "prod-eu", "id": "c-123", "url": "https://prod-eu.example.com"},
		"enforcement": map[string]any{"name": "logging", "repo": "https://git.example.com/logging.git", "path": "chart",
			"namespace": "default", "helm": map[string]any{"parameters": map[string]any{"replicas": "2"}}},
		"rule":       map[string]any{"namespace": "team", "name": "baseline"},
		"phase":      "beforeInstall",
		"deliveryId": "dlv_1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("body = %s\nwant %v", body, want)
	}
	if strings.Contains(string(body), "rancher") {
		t.Errorf("body leaks the source Secret reference: %s", body)
	}
}

func TestTriggerTimeout(t *testing.T) {
	for secs, want := range map[int]time.Duration{0: 5 * time.Second, 15: 15 * time.Second, 45: 30 * time.Second, 10000: 30 * time.Second} {
		if got := triggerTimeout(events.Trigger{TimeoutSeconds: secs}, 5*time.Second, 30*time.Second); got != want {
			t.Errorf("triggerTimeout(%d) = %s, want %s", secs, got, want)
		}
	}
}
