package service

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// GetJSON on a real bucket: a missing key is nil without an error, a stored value comes back
// decoded with its revision, and a value that is not JSON is an error naming the value and key.
func TestGetJSON(t *testing.T) {
	ctx := context.Background()
	kv, err := testenv.StartNATS(t).JetStream(t).CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "getjson"})
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Intent string `json:"intent"`
	}
	if got, rev, err := GetJSON[entry](ctx, kv, "missing", "test entry"); got != nil || rev != 0 || err != nil {
		t.Fatalf("missing key = %v, %d, %v; want nil, 0, nil", got, rev, err)
	}
	putRev, err := kv.Put(ctx, "k", []byte(`{"intent":"i-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, rev, err := GetJSON[entry](ctx, kv, "k", "test entry"); err != nil || got == nil || got.Intent != "i-1" || rev != putRev {
		t.Fatalf("stored key = %+v, %d, %v; want intent i-1 at revision %d", got, rev, err, putRev)
	}
	if _, err := kv.Put(ctx, "bad", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := GetJSON[entry](ctx, kv, "bad", "test entry"); err == nil || !strings.Contains(err.Error(), "decode test entry bad") {
		t.Fatalf("undecodable value: error %v, want one naming the test entry bad", err)
	}
}

// EachEntry on a real bucket: it visits exactly the current entries that match its filter
// (not deleted ones, not other prefixes), returns on an empty match, and stops at fn's error.
func TestEachEntry(t *testing.T) {
	ctx := context.Background()
	kv, err := testenv.StartNATS(t).JetStream(t).CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "eachentry"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"held.a", "held.b", "held.gone", "pair.x"} {
		if _, err := kv.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "held.gone"); err != nil {
		t.Fatal(err)
	}
	var seen []string
	if err := EachEntry(ctx, kv, "held.>", func(e jetstream.KeyValueEntry) error {
		seen = append(seen, e.Key()+"="+string(e.Value()))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, ","); got != "held.a=held.a,held.b=held.b" {
		t.Errorf("visited %s, want held.a and held.b only", got)
	}
	if err := EachEntry(ctx, kv, "degraded.>", func(jetstream.KeyValueEntry) error {
		t.Error("visited an entry of an empty match")
		return nil
	}); err != nil {
		t.Fatalf("empty match: %v", err)
	}
	stop := errors.New("stop")
	calls := 0
	if err := EachEntry(ctx, kv, ">", func(jetstream.KeyValueEntry) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn's error: got %v after %d calls, want stop after 1", err, calls)
	}
}

// EachEntryOf on a real bucket: one watch visits the current entries matching any of its
// filters, wildcards included, and nothing else.
func TestEachEntryOf(t *testing.T) {
	ctx := context.Background()
	kv, err := testenv.StartNATS(t).JetStream(t).CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "eachentryof"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"clusters.s1.a", "clusters.s2.a", "clusters.s1.b", "clusters.s1.c", "sources.s1"} {
		if _, err := kv.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	if err := EachEntryOf(ctx, kv, []string{"clusters.*.a", "clusters.*.c"}, func(e jetstream.KeyValueEntry) error {
		seen = append(seen, e.Key())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(seen)
	if got := strings.Join(seen, ","); got != "clusters.s1.a,clusters.s1.c,clusters.s2.a" {
		t.Errorf("visited %s, want the a and c keys of every source", got)
	}
}
