package rancherfake

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
)

// TestListingFollowsFiltersAndSetClusters: the clusters a filter matches are kept between the
// pages of a scan, each filter its own, and a SetClusters replaces them all.
func TestListingFollowsFiltersAndSetClusters(t *testing.T) {
	s := New(t, "tok", 2)
	s.SetClusters(Cluster("c-1", "a", "active", nil), Cluster("c-2", "b", "provisioning", nil),
		Cluster("c-3", "c", "active", nil), Cluster("c-4", "d", "active", nil))
	ids := func(query string) []string {
		t.Helper()
		var got []string
		for next := s.URL + "/v3/clusters?" + query; next != ""; {
			req, err := http.NewRequest(http.MethodGet, next, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := s.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var page struct {
				Data       []struct{ ID string }
				Pagination struct{ Next string }
			}
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range page.Data {
				got = append(got, c.ID)
			}
			next = page.Pagination.Next
		}
		return got
	}
	for query, want := range map[string][]string{
		"":             {"c-1", "c-2", "c-3", "c-4"},
		"state=active": {"c-1", "c-3", "c-4"},
		"name=b":       {"c-2"},
	} {
		if got := ids(query); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", query, got, want)
		}
	}
	s.SetClusters(Cluster("c-2", "b", "active", nil), Cluster("c-5", "e", "error", nil))
	for query, want := range map[string][]string{
		"":             {"c-2", "c-5"},
		"state=active": {"c-2"},
		"name=b":       {"c-2"},
	} {
		if got := ids(query); !slices.Equal(got, want) {
			t.Errorf("after SetClusters, %q: %v, want %v", query, got, want)
		}
	}
}

// BenchmarkScan is one scan of 10,000 clusters with a filter, in pages of 100, as the pipeline
// benchmark's source-scanner asks for it: the fake's own CPU, which shares the machine with the
// services the benchmark measures.
func BenchmarkScan(b *testing.B) {
	h := NewHandler("tok", 100)
	fleet := make([]map[string]any, 10000)
	for i := range fleet {
		fleet[i] = Cluster("c-"+strconv.Itoa(i), "bench-"+strconv.Itoa(i), "active", nil)
	}
	h.SetClusters(fleet...)
	b.ReportAllocs()
	for b.Loop() {
		for marker := 0; marker < len(fleet); marker += 100 {
			req := httptest.NewRequest(http.MethodGet, "/v3/clusters?driver=imported&state=active&marker="+strconv.Itoa(marker), nil)
			req.Header.Set("Authorization", "Bearer tok")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("page at %d: %d", marker, w.Code)
			}
		}
	}
}
