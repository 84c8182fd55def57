package gke

import (
	"encoding/json"
	"testing"

	container "google.golang.org/api/container/v1"
)

// FuzzConvert feeds Convert and Matches arbitrary clusters of a list answer (JSON as the API
// returns it): they never panic, and a cluster Convert accepts has a key under its project and
// location. Found inputs are kept in testdata/fuzz/FuzzConvert.
func FuzzConvert(f *testing.F) {
	for _, seed := range []string{
		`{"name":"prod","location":"europe-west1","endpoint":"34.1.2.3","status":"RUNNING","resourceLabels":{"env":"prod"},"masterAuth":{"clusterCaCertificate":"Zm9v"},"currentMasterVersion":"1.31","id":"abc"}`,
		`{"name":"prod"}`, `{"location":"l"}`, `{}`, `{"name":"p","location":"l","resourceLabels":{"":""}}`,
		`{"name":"UPPER_case","location":"l","nodePools":[{"name":"np","config":{"machineType":"e2"}}]}`,
	} {
		f.Add([]byte(seed), "env", "prod")
	}
	f.Fuzz(func(t *testing.T, body []byte, filterKey, filterValue string) {
		var c container.Cluster
		if json.Unmarshal(body, &c) != nil {
			return
		}
		got, err := Convert("proj", &c)
		if obj, err := toMap(&c); err == nil {
			_ = Matches(obj, "proj", map[string]string{filterKey: filterValue})
		}
		if err != nil {
			return
		}
		if want := "projects/proj/locations/" + c.Location + "/clusters/" + c.Name; got.Key != want || got.Name == "" {
			t.Errorf("key %q name %q, want key %q", got.Key, got.Name, want)
		}
	})
}
