// Package events is Enforcement's event contract: the typed events every service publishes and
// consumes, the NATS subjects they travel on, their CloudEvents encoding, the JetStream topology
// (one stream, durable pull consumers, key-value buckets) and the publish and consume helpers that
// make delivery safe to retry.
//
// Why it looks the way it does:
//
//   - Every event is a Go struct with an explicit, versioned type name
//     ("io.enforcement.cluster.appeared.v1"). Names are written out in one catalog, never derived
//     by reflection, so renaming a Go type never changes the wire.
//   - Subjects are hierarchical, "enforcement.<entity>.<action>.<keys...>", so that a subscriber
//     can filter by event kind, by source and by cluster with plain NATS wildcards. Key tokens are
//     escaped (see EscapeToken): a '.' in a cluster name becomes "%2E" and cannot split a subject.
//   - Event ids are deterministic business keys that include a sequence (rule generation,
//     inventory revision), and the id is sent as Nats-Msg-Id: a republish inside the stream's
//     duplicate window is dropped by the server, while appeared → gone → appeared is not.
//   - Delivery is at least once. The consumer helper decides in one place whether a message is
//     acknowledged, retried with backoff, or terminated into a dead letter that keeps the reason
//     and the original event. Messages that share an ordering key are handled one at a time and
//     a retry is done in place, so a later message of the same key never overtakes a failed one.
package events
