package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// An install that waits for its beforeInstall webhook gets a line of its own, so the local run
// does not look stuck between "wants" and "Created".
func TestNarrateInstallGated(t *testing.T) {
	in := events.InstallIntent{
		Rule:        events.RuleRef{Namespace: "enforcement", Name: "demo", Generation: 1},
		Cluster:     events.Target{Name: "demo-eu-1", Revision: 1},
		Enforcement: events.Enforcement{Name: "helm-guestbook", Repo: "https://git.example/guestbook"},
		SpecHash:    "h1",
		Triggers:    &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: "http://hooks.example/before"}},
	}
	m, err := events.Encode(&events.InstallGated{IntentID: in.ID(), Application: "demo-eu-1-helm-guestbook", Intent: in}, "/test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := "Install of helm-guestbook on demo-eu-1 waits for its beforeInstall webhook"
	if got := narrate(m); got != want {
		t.Errorf("narrate(InstallGated) = %q, want %q", got, want)
	}
}

// A resync's restore reads as a restore, never as a creation.
func TestNarrateRestored(t *testing.T) {
	rule := events.RuleRef{Namespace: "enforcement", Name: "demo", Generation: 1}
	for _, tt := range []struct {
		ev   events.Event
		want string
	}{
		{&events.InstallSucceeded{IntentID: "i1", Rule: rule, Cluster: "demo-eu-1", Enforcement: "helm-guestbook",
			Application: "demo-eu-1-helm-guestbook", Restored: "2026-12-02T05:00:00Z"},
			"Restored Application argocd/demo-eu-1-helm-guestbook (deleted or edited by hand, or lost to an outage)"},
		{&events.UninstallDone{IntentID: "u1", Rule: rule, Cluster: "demo-eu-1", Enforcement: "helm-guestbook",
			Application: "demo-eu-1-helm-guestbook", Deleted: true, Restored: "2026-12-02T05:00:00Z"},
			"Deleted Application argocd/demo-eu-1-helm-guestbook again: no rule wants it"},
	} {
		m, err := events.Encode(tt.ev, "/test", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got := narrate(m); got != tt.want {
			t.Errorf("narrate(%s) = %q, want %q", tt.ev.Type(), got, tt.want)
		}
	}
}

// Once the local run is ready it points at preview, explain and events, with the NATS URL to
// use and the demo rule written where the preview command line says.
func TestLocalRunPointsAtPreviewAndExplain(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	if err := sayNextSteps(dir, "nats://127.0.0.1:4999", func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }); err != nil {
		t.Fatal(err)
	}
	rule := filepath.Join(dir, "demo-rule.yaml")
	want := []string{
		"Before applying a rule edit, preview it: edit " + rule + ", then   NATS_URL=nats://127.0.0.1:4999 go run ./cmd/enforcement preview -f " + rule,
		"Why does a cluster have what it has:   NATS_URL=nats://127.0.0.1:4999 go run ./cmd/enforcement explain cluster demo-eu-1   (or explain rule enforcement/demo)",
		"Every decision as it happens:   NATS_URL=nats://127.0.0.1:4999 go run ./cmd/enforcement events --follow --cluster demo-eu-1",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("next steps:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if b, err := os.ReadFile(rule); err != nil || string(b) != demoRule {
		t.Errorf("demo rule written: %v\n%s", err, b)
	}
}
