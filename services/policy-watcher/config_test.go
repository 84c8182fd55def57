package main

import (
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	cfg, err := loadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := config{PollInterval: 30 * time.Second, StableDuration: 120 * time.Second, ClaimName: "policy-watcher-claim",
		Namespace: "default", ClusterName: "default"}
	if cfg != want {
		t.Fatalf("defaults = %+v, want %+v", cfg, want)
	}

	// The original deployment's values, and CLUSTER_NAME following WATCH_NAMESPACE.
	cfg, err = loadConfig(env(map[string]string{"WATCH_NAMESPACE": "cluster1", "POLL_INTERVAL_SEC": "10", "STABLE_DURATION_SEC": "30"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PollInterval != 10*time.Second || cfg.StableDuration != 30*time.Second || cfg.ClusterName != "cluster1" || cfg.NATSURL != "" {
		t.Fatalf("original deployment env: %+v", cfg)
	}
	cfg, err = loadConfig(env(map[string]string{"POLL_INTERVAL_SEC": "1500ms", "STABLE_DURATION_SEC": "0", "CLUSTER_NAME": "east", "NATS_URL": "nats://n:4222"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PollInterval != 1500*time.Millisecond || cfg.StableDuration != 0 || cfg.ClusterName != "east" || cfg.NATSURL != "nats://n:4222" {
		t.Fatalf("Go durations: %+v", cfg)
	}

	for name, value := range map[string]string{
		"POLL_INTERVAL_SEC":   "0",
		"STABLE_DURATION_SEC": "-1",
		"TARGET_CLAIM_NAME":   strings.Repeat("x", 254),
	} {
		if _, err := loadConfig(env(map[string]string{name: value})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v, want one naming the variable", name, value, err)
		}
	}
	if _, err := loadConfig(env(map[string]string{"POLL_INTERVAL_SEC": "soon"})); err == nil || !strings.Contains(err.Error(), "POLL_INTERVAL_SEC") {
		t.Errorf("POLL_INTERVAL_SEC=soon: error %v", err)
	}
}
