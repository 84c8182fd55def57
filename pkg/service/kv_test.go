package service

import (
	"context"
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
