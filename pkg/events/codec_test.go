package events

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestEncodeDecodeRoundTripsEveryEventType(t *testing.T) {
	for _, e := range sampleEvents() {
		m, err := Encode(e, "/enforcement/test", now)
		if err != nil {
			t.Fatalf("Encode(%s): %v", e.Type(), err)
		}
		if got := m.Header.Get(nats.MsgIdHdr); got != e.ID() {
			t.Errorf("%s: Nats-Msg-Id %q, want the event id %q", e.Type(), got, e.ID())
		}
		got, meta, err := Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("Decode(%s): %v", e.Type(), err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("%s: round trip changed the event:\n got %#v\nwant %#v", e.Type(), got, e)
		}
		if meta.ID != e.ID() || meta.Type != e.Type() || meta.Source != "/enforcement/test" || !meta.Time.Equal(now) {
			t.Errorf("%s: meta %+v", e.Type(), meta)
		}
	}
}

func TestDecodeIgnoresHeaderCase(t *testing.T) {
	e := sampleEvents()[0]
	m, err := Encode(e, "/enforcement/test", now)
	if err != nil {
		t.Fatal(err)
	}
	upper := nats.Header{}
	for k, v := range m.Header {
		upper[strings.ToUpper(k[:1])+k[1:]] = v // "Ce-id", "Content-type", as some clients send them
	}
	got, _, err := DecodeAs[*ClusterAppeared](m.Subject, upper, m.Data)
	if err != nil {
		t.Fatalf("decode with re-cased headers: %v", err)
	}
	if got.Cluster.Name != "prod.eu-1" {
		t.Errorf("decoded cluster name %q", got.Cluster.Name)
	}
}

func TestDecodeRejectsInvalidMessagesWithAClearError(t *testing.T) {
	good, err := Encode(sampleEvents()[0], "/x", now)
	if err != nil {
		t.Fatal(err)
	}
	with := func(key, value string) nats.Header {
		h := nats.Header{}
		for k, v := range good.Header {
			h[k] = v
		}
		if value == "" {
			delete(h, key)
		} else {
			h.Set(key, value)
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		header nats.Header
		body   string
		want   string
	}{
		{"no spec version", with(HeaderSpecVersion, ""), string(good.Data), "ce-specversion"},
		{"old spec version", with(HeaderSpecVersion, "0.3"), string(good.Data), "ce-specversion \"0.3\""},
		{"no id", with(HeaderID, ""), string(good.Data), "ce-id is missing"},
		{"unknown type", with(HeaderType, "io.enforcement.cluster.exploded.v1"), string(good.Data), "unknown ce-type"},
		{"xml body", with(HeaderContentType, "application/xml"), string(good.Data), "content-type"},
		{"bad time", with(HeaderTime, "yesterday"), string(good.Data), "ce-time"},
		{"not json", good.Header, "{not json", "body"},
		{"wrong field type", good.Header, `{"cluster": {"name": 5}}`, "body"},
		{"trailing data", good.Header, string(good.Data) + "{}", "trailing data"},
		{"missing fields", good.Header, `{"cluster": {"name": "x"}, "revision": 1}`, "required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Decode(good.Subject, tc.header, []byte(tc.body))
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("Decode: %v, want ErrInvalidEvent", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestDecodeAsRejectsAnotherType(t *testing.T) {
	m, err := Encode(sampleEvents()[0], "/x", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := DecodeAs[*ClusterGone](m.Subject, m.Header, m.Data); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("DecodeAs with the wrong type: %v, want ErrInvalidEvent", err)
	}
}

func TestEncodeRefusesInvalidEvents(t *testing.T) {
	for _, e := range []Event{
		&ClusterAppeared{},
		&InstallIntent{Rule: testRule},
		&TriggerDelivered{DeliveryID: "d", IntentID: "i", Rule: testRule, Cluster: "c", Phase: "duringInstall"},
		&TriggerAttempted{DeliveryID: "d", IntentID: "i", Rule: testRule, Cluster: "c", Phase: PhaseBeforeInstall, Series: "event-1-1", Result: "success"},
		&ComplianceChanged{Cluster: "c", Claim: "x", Value: "Compliant"},
	} {
		if _, err := Encode(e, "/x", now); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("Encode(%T) = %v, want ErrInvalidEvent", e, err)
		}
	}
}

// FuzzDecode shows that no body and no header value makes Decode panic; it either returns a
// valid event or an ErrInvalidEvent.
func FuzzDecode(f *testing.F) {
	for _, e := range sampleEvents() {
		m, _ := Encode(e, "/x", now)
		f.Add(m.Header.Get(HeaderType), m.Header.Get(HeaderID), m.Header.Get(HeaderTime), m.Data)
	}
	f.Add("", "", "", []byte("null"))
	for _, body := range encodingJSONQuirks {
		f.Add((&ClusterAppeared{}).Type(), "id-1", "", []byte(body))
	}
	f.Fuzz(func(t *testing.T, typ, id, ts string, body []byte) {
		if d, ok := byType[typ]; ok {
			sameAsEncodingJSON(t, d, body)
		}
		h := nats.Header{}
		h.Set("CE-SPECVERSION", "1.0")
		h.Set("ce-type", typ)
		h.Set("Ce-Id", id)
		h.Set("ce-time", ts)
		e, _, err := Decode("enforcement.x", h, body)
		if err != nil {
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("error %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		if e.Validate() != nil {
			t.Fatal("Decode returned an event that does not validate")
		}
		_ = Subject(e)
	})
}

// encodingJSONQuirks are bodies where encoding/json is lenient: Decode must read them as it does.
var encodingJSONQuirks = []string{
	`{"ID":"id-1","CLUSTER":{"name":"a","source":{"kind":"rancher"}}}`,
	`{"id":"x","id":"id-1","cluster":{"name":"a","name":"b"}}`,
	"{\"id\":\"id-1\",\"cluster\":{\"name\":\"a\xffb\"}}",
	`{"id":"id-1","cluster":null,"unknown":[1,{"a":2}]}`,
	`{"id":"id-1","cluster":{"labels":{"k":"v","k":"w"},"attributes":{"n":1e3,"b":true}}}`,
	`{"id":"id-1"}]`,
	`{"id":1}`,
	`{"id":"id-1"} {"id":"id-2"}`,
}

// sameAsEncodingJSON checks that unmarshalBody, Decode's body decoder, accepts what
// encoding/json.Unmarshal accepts and gives the same event, and refuses what it refuses.
func sameAsEncodingJSON(t *testing.T, d *descriptor, body []byte) {
	t.Helper()
	want, got := d.new(), d.new()
	wantErr, gotErr := json.Unmarshal(body, want), unmarshalBody(body, got)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("body %q: encoding/json says %v, unmarshalBody says %v", body, wantErr, gotErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("body %q: unmarshalBody gave\n%#v\nencoding/json gave\n%#v", body, got, want)
	}
}

func TestDecodeBodyReadsWhatEncodingJSONReads(t *testing.T) {
	for _, d := range byType {
		for _, body := range encodingJSONQuirks {
			sameAsEncodingJSON(t, d, []byte(body))
		}
	}
}
