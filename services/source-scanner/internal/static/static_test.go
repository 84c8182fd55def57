package static_test

import (
	"strings"
	"testing"

	"github.com/enforcement-io/enforcement/services/source-scanner/internal/static"
)

func TestParse(t *testing.T) {
	doc := `
- name: edge-1
  url: https://edge-1.example:6443
  labels: {env: prod, region: br}
  attributes: {zone: a, nodes: 3}
  secretName: edge-1-credentials
- name: lab
  url: https://lab.example
  state: provisioning
`
	got, err := static.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d clusters", len(got))
	}
	e := got[0]
	if e.Key != "edge-1" || e.Name != "edge-1" || e.URL != "https://edge-1.example:6443" || e.State != "active" || !e.Eligible {
		t.Errorf("edge-1 = %+v", e)
	}
	if e.Labels["region"] != "br" || e.Attributes["zone"] != "a" || e.Attributes["nodes"] != float64(3) ||
		e.Source.SecretName != "edge-1-credentials" {
		t.Errorf("edge-1 labels/attributes = %v %v", e.Labels, e.Attributes)
	}
	if got[1].Eligible || got[1].State != "provisioning" {
		t.Errorf("lab = %+v, want present but not eligible", got[1])
	}
}

func TestParseRejects(t *testing.T) {
	tests := map[string]string{
		"not yaml":       "- name: [",
		"unknown field":  "- name: a\n  url: https://a\n  lables: {}",
		"no name":        "- url: https://a",
		"no url":         "- name: a",
		"relative url":   "- name: a\n  url: a.example",
		"duplicate":      "- name: a\n  url: https://a\n- name: a\n  url: https://b",
		"not a list":     "name: a",
		"url with user":  "- name: a\n  url: https://bot:CANARY-static@a.example",
		"url with query": "- name: a\n  url: https://a.example/?token=CANARY-static",
		"malformed url":  "- name: a\n  url: \"https://a.example:CANARY-static/\"",
	}
	for name, doc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := static.Parse([]byte(doc))
			if err == nil {
				t.Fatalf("parsed %v, want an error", got)
			}
			if !strings.Contains(err.Error(), static.DataKey) {
				t.Errorf("error %q does not name %s", err, static.DataKey)
			}
			if strings.Contains(err.Error(), "CANARY") {
				t.Errorf("error %q echoes the url's credentials", err)
			}
		})
	}
}
