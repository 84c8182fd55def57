package scanner

import (
	"errors"
	"fmt"
	"sort"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Parts gathers the listings of a source that lists in parts (the regions of an EKS source, the
// projects of a GKE source) into one listing, which is complete only when every part is. The
// zero value is ready to use: it gathers the parts' clusters (Add) for Result. The ListPages of
// a PagedLister sets Each instead, hands each page over as it is listed (Page), ends each part
// with Done and the listing with Err.
type Parts struct {
	// Each, when set, receives the pages of the parts as they are listed instead of Parts
	// gathering them. Once a part failed, the pages of the parts after it are not handed over,
	// since the listing fails anyway; those parts are still listed, so that the error names
	// every part that fails.
	Each func([]events.Cluster) error

	stopped  error // Each's
	clusters []events.Cluster
	errs     []error
	parts    int
	failed   int
	reason   string
}

// Add records one part's listing: its clusters, or err with the degraded reason of the failure.
// name says which part it was in the error ("region eu-west-1"). Unauthorized and
// PartialListing are kept for the result; any other reason makes the part a failed one.
func (p *Parts) Add(name string, clusters []events.Cluster, reason string, err error) {
	if err == nil {
		_ = p.Page(clusters) // gathered, or Each's error, which Stopped keeps
	}
	p.Done(name, reason, err)
}

// Page hands one page of the part being listed to Each (to Add's gathering without Each). It
// returns Each's error, which stops the listing: the lister returns it (Stopped) and lists no
// further.
func (p *Parts) Page(clusters []events.Cluster) error {
	switch {
	case p.stopped != nil:
		return p.stopped
	case p.Each == nil:
		p.clusters = append(p.clusters, clusters...)
	case p.failed == 0:
		p.stopped = p.Each(clusters)
	}
	return p.stopped
}

// Stopped returns the error of Each's that stopped the listing, nil while none did.
func (p *Parts) Stopped() error { return p.stopped }

// Done ends one part: err is nil when every page of it was handed over (Page), or the part's
// failure with its degraded reason, as for Add.
func (p *Parts) Done(name, reason string, err error) {
	p.parts++
	if err == nil {
		return
	}
	p.failed++
	switch {
	case reason == events.DegradedUnauthorized:
		p.reason = reason
	case reason == events.DegradedPartial && p.reason == "":
		p.reason = reason
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
}

// Result returns the clusters of every part sorted by key, or, once any part failed, a
// DegradedError joining the parts' errors: Unauthorized if a part was refused, PartialListing if
// a part listed only partly or other parts listed, ListFailed when every part failed.
func (p *Parts) Result() ([]events.Cluster, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	sort.Slice(p.clusters, func(i, j int) bool { return p.clusters[i].Key < p.clusters[j].Key })
	return p.clusters, nil
}

// Err returns, once any part failed, the DegradedError Result would, and nil otherwise.
func (p *Parts) Err() error {
	if p.failed == 0 {
		return nil
	}
	reason := p.reason
	if reason == "" {
		reason = events.DegradedListFailed
		if p.failed < p.parts {
			reason = events.DegradedPartial
		}
	}
	return Degraded(reason, errors.Join(p.errs...))
}
