package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestReleaseRemovals seeds source-scanner's inventory bucket on a real NATS with two trips of one
// source (scans 12 and 17) and a gone cluster, and runs the command: without arguments it lists
// both trips with their clusters and the command that releases each; with a source and a trip
// it publishes the removals released event for that trip only (with the held clusters); a trip
// that holds nothing, or a malformed one, is refused with a clear error and publishes nothing.
func TestReleaseRemovals(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := eventstest.Bus(t, srv.URL())
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, events.BucketInventory)
	if err != nil {
		t.Fatal(err)
	}
	ref := events.SourceRef{Kind: "static", SecretNamespace: "enforcement", SecretName: "static"}
	ref.ID = events.SourceID(ref.Kind, ref.SecretNamespace, ref.SecretName, nil)
	put := func(key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	put("sources."+ref.ID, map[string]any{"source": ref, "scan": 20, "published": 1})
	for name, rec := range map[string]map[string]any{
		"edge-1": {},
		"edge-5": {"heldAt": 12}, "edge-6": {"heldAt": 12},
		"edge-3": {"heldAt": 17}, "edge-4": {"heldAt": 17}, "edge-7": {"heldAt": 17}, "edge-8": {"heldAt": 17},
		"edge-9": {"heldAt": 12, "event": "gone"}, // released already, its gone event pending
	} {
		rec["cluster"] = map[string]any{"source": ref, "key": name, "name": name, "url": "https://" + name}
		put("clusters."+ref.ID+"."+base64.RawURLEncoding.EncodeToString([]byte(name)), rec)
	}
	env := map[string]string{"NATS_URL": srv.URL(), "USER": "ops"}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append([]string{"release-removals"}, args...), func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}
	reader := eventstest.NewReader(t, js)

	out, err := cli()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("%s  static  12    2     edge-5, edge-6", ref.ID),
		fmt.Sprintf("%s  static  17    4     edge-3, edge-4, edge-7 and 1 more", ref.ID),
		"enforcement release-removals " + ref.ID + " 12",
		"enforcement release-removals " + ref.ID + " 17",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("listing does not contain %q:\n%s", want, out)
		}
	}

	for _, args := range [][]string{{ref.ID, "13"}, {ref.ID, "20"}, {ref.ID, "x"}, {"fedcba9876543210", "12"}, {ref.ID}} {
		if _, err := cli(args...); err == nil {
			t.Errorf("release-removals %q succeeded", args)
		}
	}
	_, err = cli(ref.ID, "13")
	if err == nil || !strings.Contains(err.Error(), "trip 13 of source "+ref.ID+" holds no removal; its held trips are 12, 17") {
		t.Errorf("trip 13: %v", err)
	}
	if evs := reader.New(t); len(evs) != 0 {
		t.Fatalf("refused releases published %d events", len(evs))
	}

	out, err = cli(ref.ID, "12")
	if err != nil || !strings.Contains(out, "Released trip 12 of source static/"+ref.ID+" (2 clusters: edge-5, edge-6)") {
		t.Fatalf("release 12: %q, %v", out, err)
	}
	evs := reader.New(t)
	want := &events.RemovalsReleased{Source: ref, Trip: 12, Clusters: []string{"edge-5", "edge-6"}}
	if len(evs) != 1 {
		t.Fatalf("release 12 published %d events", len(evs))
	}
	got, ok := evs[0].(*events.RemovalsReleased)
	if !ok || !strings.HasPrefix(got.By, "ops@") {
		t.Fatalf("release 12 published %#v", evs[0])
	}
	got.By = ""
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("release 12 published %+v, want %+v", got, want)
	}
}
