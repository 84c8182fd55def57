package scanner

import (
	"errors"
	"fmt"
	"sort"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Parts gathers the listings of a source that lists in parts (the regions of an EKS source, the
// projects of a GKE source) into one listing, which is complete only when every part is. The
// zero value is ready to use.
type Parts struct {
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
	p.parts++
	if err == nil {
		p.clusters = append(p.clusters, clusters...)
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
	if p.failed > 0 {
		reason := p.reason
		if reason == "" {
			reason = events.DegradedListFailed
			if p.failed < p.parts {
				reason = events.DegradedPartial
			}
		}
		return nil, Degraded(reason, errors.Join(p.errs...))
	}
	sort.Slice(p.clusters, func(i, j int) bool { return p.clusters[i].Key < p.clusters[j].Key })
	return p.clusters, nil
}
