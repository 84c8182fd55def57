package scanner

// Names. An EKS or GKE cluster whose provider name is not a valid object name (`Prod_Cluster.1`)
// is named by events.ObjectName: normalised, with 64 bits of the name's SHA-256 as suffix, so
// that nobody who can create clusters can craft a name that normalises to another cluster's.
// Versions before used events.LegacyObjectName (32 bits, a collision found in seconds), and a
// cluster they named must keep that name: its Argo CD destination and objects are named after
// it, and a new name would delete and re-create them.
//
// So the scanner remembers, per cluster identity, the legacy name it published, and keeps it.
// The memory is the inventory itself: the records of every source hold each cluster's identity
// and the name last announced, and survive restarts; nothing else is stored. For a listed
// cluster whose legacy name differs from its listed (64-bit) name (Source.LegacyName):
//
//   - known to the source (a live record): it keeps its legacy name if its record holds it (an
//     upgrade), and its listed name otherwise (a cluster first seen by this version);
//   - new to the source: it takes its legacy name if a live record of another source holds its
//     identity under that name (a rule moved to another Secret or region list that lists the
//     same ARN: a handover keeps the name); otherwise, a cluster seen for the first time, it
//     keeps the listed 64-bit name.
//
// Only a cluster's own legacy name is ever kept, never another name a record holds, so the
// memory cannot give a cluster another cluster's name. Two identities can still meet on one
// name: two clusters that versions before named alike (a 32-bit collision from before the
// upgrade) both keep it, and a cluster whose provider name is literally another's legacy name
// (`prod-cluster-1-e227441d`, a valid name, unchanged) meets it. rule-engine and argo-syncer
// tell them apart by identity: the later gets NameConflict and nothing of the first's.
//
// The lookup in other sources costs one KV watch per namesPerWatch clusters new to the source
// with a normalised name, filtered on their keys; steady scans read nothing.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// namesPerWatch bounds the keys one lookup watch filters on.
const namesPerWatch = 256

// keepNames gives the listed clusters the legacy names the inventory remembers for them (see the
// file comment). An error is a failure of the bucket: the scan fails and changes nothing.
func (s *Scanner) keepNames(ctx context.Context, st *sourceState, src Source, listing []events.Cluster) error {
	if src.LegacyName == nil {
		return nil
	}
	// wanted are the clusters new to the source whose legacy name differs from their listed
	// name, by the KV key token of their cluster key.
	wanted := map[string]*legacyCandidate{}
	for i := range listing {
		c := &listing[i]
		known, ok := st.clusters[c.Key]
		if ok && !known.tombstone() && known.Cluster.Name == c.Name {
			continue
		}
		legacy := src.LegacyName(*c)
		if legacy == "" || legacy == c.Name {
			continue
		}
		if ok && !known.tombstone() {
			if known.Cluster.Name == legacy {
				rename(c, legacy)
			}
			continue
		}
		wanted[keyToken(c.Key)] = &legacyCandidate{cluster: c, legacy: legacy}
	}
	if len(wanted) == 0 {
		return nil
	}
	if err := s.findLegacyNames(ctx, st.meta.Source.ID, wanted); err != nil {
		return err
	}
	for _, cand := range wanted {
		if cand.found {
			rename(cand.cluster, cand.legacy)
		}
	}
	return nil
}

// findLegacyNames marks the candidates that a live record of a source other than sourceID
// holds under their legacy name, reading the records of their keys in every source with one
// watch per namesPerWatch keys. A record that does not decode fails the lookup, naming its key,
// rather than let its cluster be renamed.
func (s *Scanner) findLegacyNames(ctx context.Context, sourceID string, wanted map[string]*legacyCandidate) error {
	filters := make([]string, 0, len(wanted))
	for token := range wanted {
		filters = append(filters, "clusters.*."+token)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for chunk := range slices.Chunk(filters, namesPerWatch) {
		err := service.EachEntryOf(lctx, s.kv, chunk, func(e jetstream.KeyValueEntry) error {
			parts := strings.SplitN(e.Key(), ".", 3)
			if len(parts) != 3 || parts[1] == sourceID {
				return nil
			}
			cand := wanted[parts[2]]
			if cand == nil || cand.found {
				return nil
			}
			var r namedRecord
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return fmt.Errorf("read inventory record %s: %w", e.Key(), err)
			}
			cand.found = r.Event != eventGone && r.Cluster.Name == cand.legacy && sameCluster(r.Cluster, *cand.cluster)
			return nil
		})
		if err != nil {
			return fmt.Errorf("look up the names of new clusters of source %s: %w", sourceID, err)
		}
	}
	return nil
}

// legacyCandidate is a listed cluster new to its source, and its legacy name; found says a
// record of another source holds its identity under that name.
type legacyCandidate struct {
	cluster *events.Cluster
	legacy  string
	found   bool
}

// namedRecord is the part of a record the lookup reads: decoding only it skips the attributes,
// most of a record's bytes.
type namedRecord struct {
	Cluster namedCluster `json:"cluster"`
	Event   string       `json:"event"`
}

// namedCluster is the part of events.Cluster that says who a cluster is and its name.
type namedCluster struct {
	Source struct {
		Kind string `json:"kind"`
	} `json:"source"`
	Identity string `json:"identity"`
	Name     string `json:"name"`
}

// sameCluster reports whether a record of another source holds the listed cluster: the same
// identity, or, for a record written before identities existed, the same kind (the key is
// already equal: an EKS ARN or a GKE path names the cluster at its provider).
func sameCluster(recorded namedCluster, listed events.Cluster) bool {
	if recorded.Identity != "" {
		return recorded.Identity == listed.Identity
	}
	return recorded.Source.Kind == listed.Source.Kind
}

// rename gives a listed cluster the name it keeps, and its `name` attribute too when that is its
// listed name (the attributes are copied: a lister may hold on to them).
func rename(c *events.Cluster, name string) {
	if n, ok := c.Attributes["name"].(string); ok && n == c.Name {
		c.Attributes = maps.Clone(c.Attributes)
		c.Attributes["name"] = name
	}
	c.Name = name
}
