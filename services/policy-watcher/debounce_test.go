package main

import (
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	stable := 2 * time.Minute
	claim := func(value string) claimState { return claimState{Exists: true, Value: value, ResourceVersion: "1"} }
	withSince := func(c claimState, since time.Time) claimState {
		c.HasSince, c.Since = true, since
		return c
	}
	tests := []struct {
		name      string
		observed  string
		since     time.Time
		claim     claimState
		now       time.Time
		want      string
		write     bool
		pending   bool
		due       time.Time
		wantSince time.Time
		change    sinceChange
	}{
		{name: "noncompliant written at once", observed: events.NonCompliant, claim: claim(events.Compliant), now: t0,
			want: events.NonCompliant, write: true},
		{name: "empty written at once", observed: events.Empty, claim: claim(events.Compliant), now: t0,
			want: events.Empty, write: true},
		{name: "noncompliant already right", observed: events.NonCompliant, claim: claim(events.NonCompliant), now: t0,
			want: events.NonCompliant},
		{name: "noncompliant stops the clock", observed: events.NonCompliant, since: t0, claim: withSince(claim(events.NonCompliant), t0), now: t0.Add(time.Minute),
			want: events.NonCompliant, change: sinceRemove},
		{name: "compliant starts the clock and holds", observed: events.Compliant, claim: claim(events.NonCompliant), now: t0,
			want: events.NonCompliant, pending: true, due: t0.Add(stable), wantSince: t0, change: sinceSet},
		{name: "compliant holds empty", observed: events.Compliant, since: t0, claim: withSince(claim(events.Empty), t0), now: t0.Add(time.Minute),
			want: events.Empty, pending: true, due: t0.Add(stable), wantSince: t0},
		{name: "compliant shorter than stable", observed: events.Compliant, since: t0, claim: withSince(claim(events.NonCompliant), t0), now: t0.Add(stable - time.Nanosecond),
			want: events.NonCompliant, pending: true, due: t0.Add(stable), wantSince: t0},
		{name: "compliant exactly stable", observed: events.Compliant, since: t0, claim: withSince(claim(events.NonCompliant), t0), now: t0.Add(stable),
			want: events.Compliant, write: true, wantSince: t0},
		{name: "compliant already right", observed: events.Compliant, claim: claim(events.Compliant), now: t0,
			want: events.Compliant, wantSince: t0},
		{name: "hand edit put back once stable", observed: events.Compliant, since: t0, claim: claim(events.NonCompliant), now: t0.Add(3 * stable),
			want: events.Compliant, write: true, wantSince: t0},
		{name: "foreign value held as noncompliant", observed: events.Compliant, claim: claim("bogus"), now: t0,
			want: events.NonCompliant, write: true, pending: true, due: t0.Add(stable), wantSince: t0, change: sinceSet},
		{name: "missing claim created noncompliant while waiting", observed: events.Compliant, claim: claimState{}, now: t0,
			want: events.NonCompliant, write: true, pending: true, due: t0.Add(stable), wantSince: t0, change: sinceSet},
		{name: "missing claim created empty", observed: events.Empty, claim: claimState{}, now: t0,
			want: events.Empty, write: true},
		{name: "clock differing from annotation rewritten", observed: events.Compliant, since: t0, claim: withSince(claim(events.NonCompliant), t0.Add(-time.Hour)), now: t0.Add(time.Second),
			want: events.NonCompliant, pending: true, due: t0.Add(stable), wantSince: t0, change: sinceSet},
		{name: "clock in the future starts over", observed: events.Compliant, since: t0.Add(time.Hour), claim: claim(events.NonCompliant), now: t0,
			want: events.NonCompliant, pending: true, due: t0.Add(stable), wantSince: t0, change: sinceSet},
		{name: "zero stable writes compliant at once", observed: events.Compliant, claim: claim(events.Empty), now: t0,
			want: events.Compliant, write: true, wantSince: t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := stable
			if tt.name == "zero stable writes compliant at once" {
				s = 0
			}
			d := decide(tt.observed, tt.since, tt.claim, tt.now, s)
			if d.Value != tt.want || d.needsValue(tt.claim) != tt.write || d.Pending != tt.pending ||
				!d.Due.Equal(tt.due) || !d.Since.Equal(tt.wantSince) || d.SinceChange != tt.change {
				t.Fatalf("decide = %+v (write %v), want value %s write %v pending %v due %v since %v change %v",
					d, d.needsValue(tt.claim), tt.want, tt.write, tt.pending, tt.due, tt.wantSince, tt.change)
			}
		})
	}
}

// TestDecideTimelines replays observation sequences through decide, carrying the clock and a
// claim that takes every decided value, as the watcher does.
func TestDecideTimelines(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	stable := 10 * time.Second
	type step struct {
		at       time.Duration
		observed string
		want     string // claim value after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"held longer than stable", []step{
			{0, events.NonCompliant, events.NonCompliant},
			{1 * time.Second, events.Compliant, events.NonCompliant},
			{10 * time.Second, events.Compliant, events.NonCompliant},
			{11 * time.Second, events.Compliant, events.Compliant},
		}},
		{"flapping never reaches compliant", []step{
			{0, events.Empty, events.Empty},
			{1 * time.Second, events.Compliant, events.Empty},
			{8 * time.Second, events.NonCompliant, events.NonCompliant},
			{9 * time.Second, events.Compliant, events.NonCompliant},
			{15 * time.Second, events.Empty, events.Empty},
			{16 * time.Second, events.Compliant, events.Empty},
			{25 * time.Second, events.Compliant, events.Empty},
			{26 * time.Second, events.Compliant, events.Compliant},
		}},
		{"noncompliant interrupts compliant at once", []step{
			{0, events.Compliant, events.NonCompliant},
			{10 * time.Second, events.Compliant, events.Compliant},
			{11 * time.Second, events.NonCompliant, events.NonCompliant},
			{12 * time.Second, events.Compliant, events.NonCompliant},
			{22 * time.Second, events.Compliant, events.Compliant},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var since time.Time
			c := claimState{}
			for _, s := range tt.steps {
				d := decide(s.observed, since, c, t0.Add(s.at), stable)
				since = d.Since
				if d.needsValue(c) {
					c.Exists, c.Value = true, d.Value
				}
				switch d.SinceChange {
				case sinceSet:
					c.HasSince, c.Since = true, d.Since
				case sinceRemove:
					c.HasSince, c.Since = false, time.Time{}
				}
				if c.Value != s.want {
					t.Fatalf("at %s observed %s: claim %s, want %s", s.at, s.observed, c.Value, s.want)
				}
			}
		})
	}
}
