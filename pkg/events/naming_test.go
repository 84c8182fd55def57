package events_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// TestNormalisedNamesCarry64Bits: a normalised name ends in 16 hex digits (64 bits) of the
// original's SHA-256 and still fits in MaxNameLength, however long the original; the legacy form
// keeps its 8, so that argo-syncer finds what earlier versions wrote; valid names are
// unchanged by both.
func TestNormalisedNamesCarry64Bits(t *testing.T) {
	suffix := regexp.MustCompile(`-([0-9a-f]+)$`)
	for _, in := range []string{"Prod_EU.1-guestbook", strings.Repeat("Long.Cluster.", 9) + "-agent", "...", "Ü"} {
		got, legacy := events.ObjectName(in), events.LegacyObjectName(in)
		m := suffix.FindStringSubmatch(got)
		if m == nil || len(m[1]) != 16 || len(got) > events.MaxNameLength || !dnsLabel.MatchString(got) {
			t.Errorf("events.ObjectName(%q) = %q (%d characters): want a DNS-1123 label of at most %d characters ending in 16 hex digits",
				in, got, len(got), events.MaxNameLength)
		}
		if l := suffix.FindStringSubmatch(legacy); l == nil || len(l[1]) != 8 || m == nil || !strings.HasPrefix(m[1], l[1]) {
			t.Errorf("events.LegacyObjectName(%q) = %q: want the first 8 of the hex digits of %q", in, legacy, got)
		}
	}
	if got := events.LegacyApplicationName("cluster1", "guestbook"); got != "cluster1-guestbook" {
		t.Errorf("LegacyApplicationName of a valid name = %q, want it unchanged", got)
	}
}

// TestLegacyCollisionsAreRealAndGone: the names eventstest gives as 32-bit collisions do
// collide under the legacy suffix (so the tests built on them test something) and do not under
// the 64-bit one.
func TestLegacyCollisionsAreRealAndGone(t *testing.T) {
	pairs := []struct{ a, b string }{
		{eventstest.ClusterCollidingA, eventstest.ClusterCollidingB},
		{eventstest.AppCollidingA + "-" + eventstest.AppCollidingEnforcement, eventstest.AppCollidingB + "-" + eventstest.AppCollidingEnforcement},
	}
	for _, p := range pairs {
		if p.a == p.b || events.LegacyObjectName(p.a) != events.LegacyObjectName(p.b) {
			t.Errorf("%q and %q: legacy names %q and %q, want one", p.a, p.b, events.LegacyObjectName(p.a), events.LegacyObjectName(p.b))
		}
		if events.ObjectName(p.a) == events.ObjectName(p.b) {
			t.Errorf("%q and %q share the 64-bit name %q", p.a, p.b, events.ObjectName(p.a))
		}
	}
}
