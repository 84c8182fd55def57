package main

import (
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// The debounce, as a pure function of what was observed, what the claim holds and the time.
//
// The original wrote "noncompliant" and "empty" at once and "compliant" only after every Policy
// had been Compliant, without interruption, for STABLE_DURATION_SEC. Its clock lived in memory,
// so a restart started it over. Here the clock is the moment the fold became compliant ("since"),
// kept in memory and, while the claim waits for it, in an annotation on the ClusterClaim itself:
// a restarted watcher (with or without NATS) picks the clock up where it stopped.

// annotationCompliantSince holds, while "compliant" waits for the stable duration, the time the
// fold became compliant (RFC 3339 with nanoseconds, UTC). The watcher removes it as soon as the
// fold is anything else. It is left in place once the claim says "compliant", so that a claim
// edited by hand is put back at once, even after a restart.
const annotationCompliantSince = "policy-watcher.enforcement.globo.com/compliant-since"

// sinceChange says what the evaluation wants done with annotationCompliantSince.
type sinceChange int

const (
	sinceKeep   sinceChange = iota // leave the annotation as it is
	sinceSet                       // write decision.Since
	sinceRemove                    // delete it: the compliant streak is over
)

// claimState is what the watcher read from the ClusterClaim.
type claimState struct {
	// Exists is false when the ClusterClaim is not there (404).
	Exists bool
	// Value is spec.value ("" when missing).
	Value string
	// ResourceVersion changes on every write, by anyone.
	ResourceVersion string
	// HasSince reports that annotationCompliantSince is present; Since is its parsed value, zero
	// when it does not parse (a hand-edited annotation is treated as absent, then rewritten).
	HasSince bool
	Since    time.Time
	// AppliedEvent is the id of the last compliance changed event the claim writer applied.
	AppliedEvent string
}

// decision is the outcome of one evaluation.
type decision struct {
	// Observed is the fold's value right now.
	Observed string
	// Value is what the claim must hold now. It differs from Observed only while "compliant"
	// waits for the stable duration: then it is the value being held.
	Value string
	// Pending is true while "compliant" waits; Due is when it will be written.
	Pending bool
	Due     time.Time
	// Since is the start of the compliant streak (zero when Observed is not compliant). The
	// watcher keeps it for the next evaluation.
	Since time.Time
	// SinceChange says whether annotationCompliantSince must be written or removed.
	SinceChange sinceChange
}

// needsValue reports whether the claim's value must be written (or the claim created).
func (d decision) needsValue(c claimState) bool { return !c.Exists || c.Value != d.Value }

// decide folds an observation, the clock carried from the previous evaluation (since; zero
// when the previous observation was not compliant) and the claim into a decision.
//
//   - Not compliant: the claim takes the observed value at once and the clock stops.
//   - Compliant, and the claim already says so: nothing to do.
//   - Compliant for at least stable: the claim takes "compliant" (now, or when the timer set
//     for Due fires: the caller evaluates again at Due, not at the next poll).
//   - Compliant for less: the claim keeps what it holds ("noncompliant" or "empty"; anything else,
//     including a missing claim, becomes "noncompliant", the conservative value, since placement
//     rules select clusters by "compliant"), and the clock is written on the claim.
//
// A clock in the future (a clock skew between two hosts, or a hand-edited annotation) starts over.
func decide(observed string, since time.Time, claim claimState, now time.Time, stable time.Duration) decision {
	if observed != events.Compliant {
		d := decision{Observed: observed, Value: observed}
		if claim.HasSince {
			d.SinceChange = sinceRemove
		}
		return d
	}
	if since.IsZero() || since.After(now) {
		since = now
	}
	d := decision{Observed: observed, Since: since}
	due := since.Add(stable)
	switch {
	case claim.Exists && claim.Value == events.Compliant:
		d.Value = events.Compliant
	case !now.Before(due):
		d.Value = events.Compliant
	default:
		d.Value = heldValue(claim)
		d.Pending, d.Due = true, due
		if !claim.HasSince || !claim.Since.Equal(since) {
			d.SinceChange = sinceSet
		}
	}
	return d
}

// heldValue is what the claim holds while "compliant" waits: its own value when that is one the
// watcher writes, "noncompliant" otherwise.
func heldValue(c claimState) string {
	if c.Exists && (c.Value == events.NonCompliant || c.Value == events.Empty) {
		return c.Value
	}
	return events.NonCompliant
}
