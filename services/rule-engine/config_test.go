package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	c, err := loadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.OperatorNamespace != "enforcement" || c.WatchNamespaces != nil || c.TemplateHTTPAllow != nil ||
		c.TemplateHTTPTimeout != 5*time.Second || c.TemplateRenderTimeout != 10*time.Second || c.SourceDegradedTTL != 10*time.Minute || c.StatusInterval != time.Second || c.MaxRemovalFraction != 0.1 ||
		c.RuleEventInterval != 30*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	c, err = loadConfig(env(map[string]string{"WATCH_NAMESPACES": " team-a, ,team-b", "TEMPLATE_HTTP_ALLOW": "httpbin.org"}))
	if err != nil || strings.Join(c.WatchNamespaces, "|") != "team-a|team-b" || c.TemplateHTTPAllow[0] != "httpbin.org" {
		t.Errorf("lists: %+v, %v", c, err)
	}
	c, err = loadConfig(env(map[string]string{"TEMPLATE_HTTP_ALLOWED_NETWORKS": "10.0.0.0/8", "TEMPLATE_HTTP_DENIED_NETWORKS": "203.0.113.0/24"}))
	if err != nil || len(c.TemplateHTTPEgress.Allowed) != 1 || c.TemplateHTTPEgress.Allowed[0].String() != "10.0.0.0/8" ||
		len(c.TemplateHTTPEgress.Denied) != 1 || c.TemplateHTTPEgress.Denied[0].String() != "203.0.113.0/24" {
		t.Errorf("networks: %+v, %v", c.TemplateHTTPEgress, err)
	}
	for name, value := range map[string]string{"TEMPLATE_HTTP_ALLOWED_NETWORKS": "example.com", "TEMPLATE_HTTP_DENIED_NETWORKS": "none", "LEADER_ELECTION": "maybe", "TEMPLATE_HTTP_TIMEOUT": "0s", "TEMPLATE_RENDER_TIMEOUT": "0", "SOURCE_DEGRADED_TTL": "ten minutes", "STATUS_INTERVAL": "-1s", "MAX_REMOVAL_FRACTION": "2", "RULE_EVENT_INTERVAL": "half a minute"} {
		_, err := loadConfig(env(map[string]string{name: value}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: error %v does not name the variable", name, value, err)
		}
	}
	// run fails at once on bad configuration, before touching the network.
	if err := run(context.Background(), env(map[string]string{"STATUS_INTERVAL": "soon"}), nil, nil); err == nil ||
		!strings.Contains(err.Error(), "STATUS_INTERVAL") {
		t.Errorf("run with bad config: %v", err)
	}
}
