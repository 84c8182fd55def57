package scanner

// Listed. rule-engine hands a rule over from its old source to a new one (a changed secretName,
// a renamed static ConfigMap, an added EKS region) only once the new source has produced a
// complete listing: before that, the old source's clusters missing from the new source's events
// may just not have been listed yet. SourceListed says so, after the scan's cluster events were
// acknowledged. It is announced at the first complete listing of each source this process scans
// (kept in memory only): once for a new source, and once more after every scanner restart, which
// also tells a rule-engine that never heard it (an upgrade) without an event at every scan.

import (
	"context"
	"fmt"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// announceListed publishes SourceListed after the first complete listing of the source in this
// process; later complete listings announce nothing.
func (s *Scanner) announceListed(ctx context.Context, st *sourceState, res Result) error {
	if st.listed {
		return nil
	}
	e := &events.SourceListed{Source: st.meta.Source, Scan: st.meta.Scan, Known: res.Known}
	if err := s.pub.PublishAll(ctx, []events.Event{e}); err != nil {
		return fmt.Errorf("publish source listed: %w", err)
	}
	s.log.Info("Source listed", "source", e.Source.ID, "kind", e.Source.Kind, "scan", e.Scan, "known", e.Known)
	st.listed = true
	return nil
}
