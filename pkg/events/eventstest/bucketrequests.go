package eventstest

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
)

// BucketRequests counts the requests to one KV bucket that pass through the server: reads of an
// entry (direct or stream message gets) and writes (puts, creates, updates, deletes).
type BucketRequests struct {
	reads, writes atomic.Int64
}

// Reads is how many entry reads were seen.
func (b *BucketRequests) Reads() int64 { return b.reads.Load() }

// Writes is how many entry writes were seen.
func (b *BucketRequests) Writes() int64 { return b.writes.Load() }

// CountBucketRequests subscribes to every subject of the server at url and counts the requests
// to bucket until the test ends. It returns once the subscription is in place.
func CountBucketRequests(t testing.TB, url, bucket string) *BucketRequests {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	counts := &BucketRequests{}
	stream := "KV_" + bucket
	_, err = nc.Subscribe(">", func(m *nats.Msg) {
		switch {
		case strings.HasPrefix(m.Subject, "$KV."+bucket+"."):
			counts.writes.Add(1)
		case strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET."+stream), m.Subject == "$JS.API.STREAM.MSG.GET."+stream:
			counts.reads.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return counts
}
