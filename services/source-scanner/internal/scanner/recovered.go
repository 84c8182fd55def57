package scanner

// Recovery. A degraded source stays degraded in the eyes of rule-engine until it hears the source
// is healthy again: SourceRecovered, published at the first complete listing after a degraded
// spell that holds no removals. The spell is kept in the source record (DegradedSince, the
// spell's first degraded scan), so a scanner restart between the degraded and the complete
// listing still announces the recovery, and the event's id comes from it, so announcing it again
// after a crash (published, but the record not yet cleared) is deduplicated by the stream.

import (
	"context"
	"fmt"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// markDegraded records that the current scan is degraded, before its SourceDegraded event is
// published. Only the first degraded scan of a spell writes the record.
func (s *Scanner) markDegraded(ctx context.Context, st *sourceState) error {
	if st.meta.DegradedSince != 0 {
		return nil
	}
	st.meta.DegradedSince = st.meta.Scan
	return s.putMeta(ctx, st)
}

// recovered ends a degraded spell after a complete listing of the current scan: it publishes
// SourceRecovered and then clears the spell from the source record. Nothing happens while the
// breaker holds removals (RemovalsHeld is degraded too; only a release or the clusters' return
// ends it) or when the source was not degraded.
func (s *Scanner) recovered(ctx context.Context, st *sourceState, res Result) error {
	if st.meta.DegradedSince == 0 || len(res.Held) > 0 {
		return nil
	}
	e := &events.SourceRecovered{Source: st.meta.Source, Scan: st.meta.Scan, DegradedSince: st.meta.DegradedSince, Known: res.Known}
	if err := s.pub.PublishAll(ctx, []events.Event{e}); err != nil {
		return fmt.Errorf("publish source recovered: %w", err)
	}
	s.log.Info("Source recovered", "source", e.Source.ID, "kind", e.Source.Kind, "scan", e.Scan,
		"degradedSince", e.DegradedSince, "known", e.Known)
	st.meta.DegradedSince = 0
	return s.putMeta(ctx, st)
}
