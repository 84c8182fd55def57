package gke

import (
	"context"
	"fmt"
	"testing"

	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke/gkefake"
)

// BenchmarkList measures one scan of a project with 1000 clusters (one list call, decoding,
// filtering and conversion) against the local fake.
func BenchmarkList(b *testing.B) {
	f := gkefake.New(b)
	for i := range 1000 {
		f.Add("proj-a", "europe-west1", fmt.Sprintf("c%04d", i), "RUNNING", map[string]string{"env": "prod"})
	}
	l, _ := newTestLister(b, f, func(o *Options) { o.Filters = map[string]string{"resourceLabels.env": "prod", "location": "europe-*"} })
	b.ResetTimer()
	for range b.N {
		c, err := l.List(context.Background())
		if err != nil || len(c) != 1000 {
			b.Fatalf("%d clusters, %v", len(c), err)
		}
	}
}
