package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nats.go"
)

// CloudEvents 1.0 attributes in binary content mode travel as "ce-" headers; the body is the JSON
// payload and "content-type" says so.
const (
	HeaderSpecVersion = "ce-specversion"
	HeaderID          = "ce-id"
	HeaderSource      = "ce-source"
	HeaderType        = "ce-type"
	HeaderSubject     = "ce-subject"
	HeaderTime        = "ce-time"
	HeaderContentType = "content-type"

	specVersion = "1.0"
	contentJSON = "application/json"
)

// ErrInvalidEvent marks a message that is not a valid event of this contract. Consumers treat it
// as permanent: the message becomes a dead letter, never a retry loop.
var ErrInvalidEvent = errors.New("invalid event")

// Meta is what a consumer knows about a message besides its payload.
type Meta struct {
	ID     string
	Type   string
	Source string
	Time   time.Time
	// Subject is the NATS subject the message arrived on.
	Subject string
	// Sequence is the stream sequence, NumDelivered the delivery count (1 on first delivery).
	Sequence     uint64
	NumDelivered uint64
	// OriginalSequence is, on a replayed dead letter (ReplayDeadLetter), the stream sequence of
	// the message it replays, from its Enforcement-Original-Sequence header; 0 otherwise.
	OriginalSequence uint64
}

// DecisionSequence is the message's place in the order its events were decided in: the stream
// sequence of the original message when this one replays it, else its own stream sequence; 0
// when neither is known (a message not read from the stream). A redelivery keeps its sequence,
// and a replay takes the original's, so a consumer that remembers the last sequence it acted on
// per key recognises a late or replayed event as older than what it already did. The header can
// only move a message back, never ahead of its own place in the stream.
func (m Meta) DecisionSequence() uint64 {
	if m.OriginalSequence != 0 && (m.Sequence == 0 || m.OriginalSequence < m.Sequence) {
		return m.OriginalSequence
	}
	return m.Sequence
}

// Encode builds the NATS message for an event in CloudEvents binary mode. source names the
// publishing service (ce-source, e.g. "/enforcement/source-scanner"). It fails if the event does
// not validate, so an invalid event never reaches the stream.
func Encode(e Event, source string, now time.Time) (*nats.Msg, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("encode %s: %w: %w", e.Type(), ErrInvalidEvent, err)
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", e.Type(), err)
	}
	m := nats.NewMsg(Subject(e))
	m.Data = body
	m.Header.Set(HeaderSpecVersion, specVersion)
	m.Header.Set(HeaderID, e.ID())
	m.Header.Set(HeaderSource, source)
	m.Header.Set(HeaderType, e.Type())
	m.Header.Set(HeaderSubject, e.OrderingKey())
	m.Header.Set(HeaderTime, now.UTC().Format(time.RFC3339Nano))
	m.Header.Set(HeaderContentType, contentJSON)
	m.Header.Set(nats.MsgIdHdr, e.ID())
	return m, nil
}

// Decode turns a message back into its typed event. Header names are matched without regard to
// case (CloudEvents headers are case-insensitive; other NATS clients may send "Ce-Id"). Every
// failure wraps ErrInvalidEvent: wrong or missing spec version, an unknown type, a missing id,
// a body that is not the type's JSON, or a payload that does not validate.
func Decode(subject string, header nats.Header, data []byte) (Event, Meta, error) {
	meta := Meta{
		ID:      headerValue(header, HeaderID),
		Type:    headerValue(header, HeaderType),
		Source:  headerValue(header, HeaderSource),
		Subject: subject,
	}
	if v := headerValue(header, HeaderSpecVersion); v != specVersion {
		return nil, meta, fmt.Errorf("%w: ce-specversion %q, want %q", ErrInvalidEvent, v, specVersion)
	}
	if meta.ID == "" {
		return nil, meta, fmt.Errorf("%w: ce-id is missing", ErrInvalidEvent)
	}
	if ct := headerValue(header, HeaderContentType); ct != "" && !strings.HasPrefix(ct, contentJSON) {
		return nil, meta, fmt.Errorf("%w: content-type %q, want %q", ErrInvalidEvent, ct, contentJSON)
	}
	d, ok := byType[meta.Type]
	if !ok {
		return nil, meta, fmt.Errorf("%w: unknown ce-type %q", ErrInvalidEvent, meta.Type)
	}
	if v := headerValue(header, HeaderDeadSequence); v != "" {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, meta, fmt.Errorf("%w: %s %q is not a stream sequence", ErrInvalidEvent, HeaderDeadSequence, v)
		}
		meta.OriginalSequence = seq
	}
	if t := headerValue(header, HeaderTime); t != "" {
		parsed, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return nil, meta, fmt.Errorf("%w: ce-time %q: %w", ErrInvalidEvent, t, err)
		}
		meta.Time = parsed
	}
	e := d.new()
	if err := unmarshalBody(data, e); err != nil {
		// Unmarshal refuses what the stream decoder below accepts (a closing bracket after the
		// object) and words some errors differently: the slower path decides and explains.
		if e, err = decodeBody(d, data); err != nil {
			return nil, meta, fmt.Errorf("%w: %s body: %w", ErrInvalidEvent, meta.Type, err)
		}
	}
	if err := e.Validate(); err != nil {
		return nil, meta, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return e, meta, nil
}

// unmarshalBody is encoding/json's Unmarshal with its semantics kept (names matched without regard
// to case, the last of duplicate names wins, invalid UTF-8 replaced), on the implementation that
// becomes encoding/json/v2 in Go 1.27: a typical event decodes in about half the time, with one
// allocation instead of 16 (BenchmarkDecode), and decoding was the largest part of a consumer's
// CPU. FuzzDecode and TestDecodeBodyReadsWhatEncodingJSONReads check that it accepts and refuses
// what encoding/json does, with the same result.
func unmarshalBody(data []byte, e Event) error {
	return jsonv1.Unmarshal(data, e)
}

// decodeBody decodes an event body with a stream decoder, as Decode did before it used
// json.Unmarshal, which is faster (no copy of the body); the error names trailing data as such.
func decodeBody(d *descriptor, data []byte) (Event, error) {
	e := d.new()
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(e); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return e, nil
}

// DecodeAs decodes a message and asserts its type. It is the one generic decode a handler that
// expects a single event type needs.
func DecodeAs[T Event](subject string, header nats.Header, data []byte) (T, Meta, error) {
	var zero T
	e, meta, err := Decode(subject, header, data)
	if err != nil {
		return zero, meta, err
	}
	t, ok := e.(T)
	if !ok {
		return zero, meta, fmt.Errorf("%w: got %s, want %T", ErrInvalidEvent, e.Type(), zero)
	}
	return t, meta, nil
}

// headerValue reads a header without regard to the case of its name.
func headerValue(h nats.Header, name string) string {
	if v, ok := h[name]; ok && len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}
