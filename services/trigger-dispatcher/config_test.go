package main

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

func TestLoadConfigDefaults(t *testing.T) {
	c, err := loadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.DefaultTimeout != 5*time.Second || c.MaxAttempts != 5 ||
		c.BackoffBase != 500*time.Millisecond || c.BackoffMax != 30*time.Second || c.BlockedRetryInterval != time.Minute {
		t.Errorf("defaults = %+v", c)
	}
	if len(c.Denied) != len(defaultDeniedNetworks) || c.Allowed != nil {
		t.Errorf("network defaults: denied %v, allowed %v", c.Denied, c.Allowed)
	}
}

func TestLoadConfigNetworks(t *testing.T) {
	tests := []struct {
		denied, allowed         string
		wantDenied, wantAllowed []netip.Prefix
	}{
		{"none", "", nil, nil},
		{"10.0.0.0/8, 192.168.1.7", "", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32")}, nil},
		{"none", "10.1.2.3/8", nil, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
	}
	for _, tt := range tests {
		env := map[string]string{"TRIGGER_DENIED_NETWORKS": tt.denied, "TRIGGER_ALLOWED_NETWORKS": tt.allowed}
		c, err := loadConfig(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c.Denied, tt.wantDenied) || !reflect.DeepEqual(c.Allowed, tt.wantAllowed) {
			t.Errorf("%q/%q: denied %v allowed %v, want %v %v", tt.denied, tt.allowed, c.Denied, c.Allowed, tt.wantDenied, tt.wantAllowed)
		}
	}
}

func TestNetPolicy(t *testing.T) {
	defaults, _ := parsePrefixes("", strings.Join(defaultDeniedNetworks, ","))
	p := netPolicy{Denied: defaults}
	for addr, allowed := range map[string]bool{
		"169.254.169.254":        false,
		"::ffff:169.254.169.254": false,
		"169.254.1.1":            false,
		"fd00:ec2::254":          false,
		"fe80::1":                false,
		"fe80::1%eth0":           false,
		"127.0.0.1":              true,
		"10.1.2.3":               true,
		"2001:db8::1":            true,
	} {
		if err := p.check(netip.MustParseAddr(addr)); (err == nil) != allowed {
			t.Errorf("check(%s) = %v, want allowed=%v", addr, err, allowed)
		}
	}
	only := netPolicy{Denied: defaults, Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16")}}
	for addr, allowed := range map[string]bool{"10.0.0.1": true, "192.168.0.1": false, "169.254.169.254": false} {
		if err := only.check(netip.MustParseAddr(addr)); (err == nil) != allowed {
			t.Errorf("allow-list check(%s) = %v, want allowed=%v", addr, err, allowed)
		}
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
	for secs, want := range map[int]time.Duration{0: 5 * time.Second, 15: 15 * time.Second, 10000: maxTriggerTimeout} {
		if got := triggerTimeout(events.Trigger{TimeoutSeconds: secs}, 5*time.Second); got != want {
			t.Errorf("triggerTimeout(%d) = %s, want %s", secs, got, want)
		}
	}
}
