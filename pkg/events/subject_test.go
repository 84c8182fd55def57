package events

import (
	"strings"
	"testing"
)

func TestEscapeToken(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"cluster1", "cluster1"},
		{"prod.eu-1", "prod%2Eeu-1"},
		{"a*b>c", "a%2Ab%3Ec"},
		{"50%", "50%25"},
		{"", "~"},
		{"~", "%7E"},
		{"arn:aws:eks:eu-west-1:1:cluster/x", "arn%3Aaws%3Aeks%3Aeu-west-1%3A1%3Acluster%2Fx"},
		{"héllo world", "h%C3%A9llo%20world"},
	} {
		got := EscapeToken(tc.in)
		if got != tc.want {
			t.Errorf("EscapeToken(%q) = %q, want %q", tc.in, got, tc.want)
		}
		back, err := UnescapeToken(got)
		if err != nil || back != tc.in {
			t.Errorf("UnescapeToken(%q) = %q, %v; want %q", got, back, err, tc.in)
		}
	}
}

func TestUnescapeTokenRejectsMalformedEscapes(t *testing.T) {
	for _, in := range []string{"%", "%2", "%zz", "a%G1"} {
		if _, err := UnescapeToken(in); err == nil {
			t.Errorf("UnescapeToken(%q) succeeded, want an error", in)
		}
	}
}

func FuzzEscapeToken(f *testing.F) {
	f.Add("prod.eu-1")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		tok := EscapeToken(s)
		if strings.ContainsAny(tok, ".*> \t\r\n") || tok == "" {
			t.Fatalf("EscapeToken(%q) = %q is not a single literal subject token", s, tok)
		}
		back, err := UnescapeToken(tok)
		if err != nil || back != s {
			t.Fatalf("round trip of %q: %q, %v", s, back, err)
		}
	})
}

func TestSubjectsAreFilterableByKindSourceAndCluster(t *testing.T) {
	want := map[string]string{
		"io.enforcement.cluster.appeared.v1":        "enforcement.cluster.appeared.rancher.0123456789abcdef.prod%2Eeu-1",
		"io.enforcement.cluster.updated.v1":         "enforcement.cluster.updated.rancher.0123456789abcdef.prod%2Eeu-1",
		"io.enforcement.cluster.gone.v1":            "enforcement.cluster.gone.rancher.0123456789abcdef.prod%2Eeu-1",
		"io.enforcement.source.degraded.v1":         "enforcement.source.degraded.rancher.0123456789abcdef",
		"io.enforcement.source.recovered.v1":        "enforcement.source.recovered.rancher.0123456789abcdef",
		"io.enforcement.source.listed.v1":           "enforcement.source.listed.rancher.0123456789abcdef",
		"io.enforcement.removals.released.v1":       "enforcement.removals.released.rancher.0123456789abcdef",
		"io.enforcement.rule.removals.released.v1":  "enforcement.rule.removals.released.team-a.dev%2Erule",
		"io.enforcement.rule.rollout.approved.v1":   "enforcement.rule.rollout.approved.team-a.dev%2Erule",
		"io.enforcement.rule.rollout.progressed.v1": "enforcement.rule.rollout.progressed.team-a.dev%2Erule",
		"io.enforcement.application.health.v1":      "enforcement.application.health.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.intent.install.v1":          "enforcement.intent.install.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.intent.uninstall.v1":        "enforcement.intent.uninstall.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.install.succeeded.v1":       "enforcement.install.succeeded.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.install.gated.v1":           "enforcement.install.gated.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.install.failed.v1":          "enforcement.install.failed.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.uninstall.done.v1":          "enforcement.uninstall.done.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.trigger.delivered.v1":       "enforcement.trigger.delivered.beforeInstall.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.trigger.failed.v1":          "enforcement.trigger.failed.afterInstall.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.trigger.attempted.v1":       "enforcement.trigger.attempted.afterInstall.prod%2Eeu-1.team-a.dev%2Erule",
		"io.enforcement.compliance.changed.v1":      "enforcement.compliance.changed.cluster1",
		"io.enforcement.claim.updated.v1":           "enforcement.claim.updated.cluster1",
	}
	seen := map[string]bool{}
	for _, e := range sampleEvents() {
		seen[e.Type()] = true
		if got := Subject(e); got != want[e.Type()] {
			t.Errorf("Subject(%s) = %q, want %q", e.Type(), got, want[e.Type()])
		}
	}
	for _, typ := range Types() {
		if !seen[typ] {
			t.Errorf("catalog type %s has no sample event", typ)
		}
	}
}

// TestUninstallIDsOfTwoIdentitiesDiffer: uninstalls of one enforcement from two clusters of the
// same name and revision (a refused handover's old pair and its successor) are two events.
func TestUninstallIDsOfTwoIdentitiesDiffer(t *testing.T) {
	old := &UninstallIntent{Rule: testRule, Cluster: Target{Name: "a", Revision: 1, Identity: "static:enforcement/cm1/a"},
		Enforcement: "guestbook", Reason: UninstallRuleDeleted}
	successor := *old
	successor.Cluster.Identity = "static:enforcement/cm2/a"
	if old.ID() == successor.ID() {
		t.Fatalf("uninstalls for two identities share id %q: the second would be deduplicated away", old.ID())
	}
}

func TestEventIDsIncludeTheirSequence(t *testing.T) {
	a := &ClusterAppeared{Cluster: sampleEvents()[0].(*ClusterAppeared).Cluster, Revision: 1}
	b := *a
	b.Revision = 2
	if a.ID() == b.ID() {
		t.Fatalf("appeared at revision 1 and 2 share id %q: a reappearance would be deduplicated away", a.ID())
	}
	var in *InstallIntent
	for _, e := range sampleEvents() {
		if i, ok := e.(*InstallIntent); ok && in == nil {
			in = i
		}
	}
	again := *in
	again.Cluster.Revision++
	if in.ID() == again.ID() {
		t.Fatalf("install intents for two cluster revisions share id %q", in.ID())
	}
	regen := *in
	regen.Rule.Generation++
	if in.ID() == regen.ID() {
		t.Fatalf("install intents for two rule generations share id %q", in.ID())
	}
	if in.ID() != (*in).ID() {
		t.Fatal("event id is not deterministic")
	}
	var att *TriggerAttempted
	for _, e := range sampleEvents() {
		if a, ok := e.(*TriggerAttempted); ok {
			att = a
		}
	}
	next, repeat := *att, *att
	next.Attempt++
	repeat.Series = "event-9-2" // the same delivery repeated after a redelivery of its event
	if att.ID() == next.ID() || att.ID() == repeat.ID() || next.ID() == repeat.ID() {
		t.Fatalf("trigger attempts share ids: %q, %q, %q", att.ID(), next.ID(), repeat.ID())
	}
}

func TestObjectName(t *testing.T) {
	long := strings.Repeat("a", 70)
	for _, tc := range []struct{ in, want string }{
		{"cluster1-guestbook", "cluster1-guestbook"},
		{"Prod_EU.1-guestbook", "prod-eu-1-guestbook-"},
		{long, strings.Repeat("a", MaxNameLength-NameSuffixDigits-1) + "-"},
		{"...", "x-"},
	} {
		got := ObjectName(tc.in)
		if !strings.HasPrefix(got, tc.want) || !isDNSLabel(got) {
			t.Errorf("ObjectName(%q) = %q, want prefix %q and a DNS-1123 label", tc.in, got, tc.want)
		}
	}
	if ObjectName("A.b") == ObjectName("a-b") {
		t.Error("normalised names of distinct inputs collide")
	}
	if got := ApplicationName("cluster1", "guestbook"); got != "cluster1-guestbook" {
		t.Errorf("ApplicationName = %q, want the original operator's cluster1-guestbook", got)
	}
}
