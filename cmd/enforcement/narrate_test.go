package main

import (
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
