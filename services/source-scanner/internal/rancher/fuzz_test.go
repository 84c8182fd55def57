package rancher

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// FuzzParsePage feeds parsePage arbitrary /v3/clusters pages: it never panics, a failure always
// names its degraded reason, and no cluster it returns carries a field Sensitive names at any
// depth. Found inputs are kept in testdata/fuzz/FuzzParsePage.
func FuzzParsePage(f *testing.F) {
	for _, seed := range []string{
		`{"type":"collection","data":[{"id":"c-1","name":"one","state":"active","labels":{"env":"prod"},"driver":"gke"}],"pagination":{"next":"https://r.example/v3/clusters?marker=2"}}`,
		`{"type":"collection","data":[{"id":"c-1","name":"one","rkeConfig":{"privateRegistries":[{"password":"x"}]},"labels":{"n":1}}]}`,
		`{"type":"collection","data":[],"pagination":{"partial":true}}`,
		`{"type":"collection","data":[{"id":"c-1"}]}`, `{"type":"error"}`, `[]`, `null`, ``,
		`{"type":"collection","data":[1,"x",null]}`, `{"type":"collection","data":[{}],"pagination":{"next":"%zz"}}`,
	} {
		f.Add([]byte(seed))
	}
	base, _ := url.Parse("https://rancher.example")
	target, _ := url.Parse("https://rancher.example/v3/clusters")
	l := &Lister{Creds: events.RancherCredentials{URL: base, Token: "token-secret"}, IgnoreFields: []string{"ignored"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		clusters, _, reason, err := l.parsePage(target, body)
		if err != nil {
			if reason == "" {
				t.Errorf("failure without a degraded reason: %v", err)
			}
			return
		}
		for _, c := range clusters {
			if c.Key == "" || c.Name == "" {
				t.Errorf("cluster without id or name: %+v", c)
			}
			b, err := json.Marshal(c.Attributes)
			if err != nil {
				t.Fatalf("attributes do not encode: %v", err)
			}
			var attrs any
			_ = json.Unmarshal(b, &attrs)
			if k := sensitiveKey(attrs); k != "" {
				t.Errorf("cluster %s keeps the sensitive field %q", c.Name, k)
			}
			if strings.Contains(string(b), "token-secret") {
				t.Errorf("cluster %s carries the token", c.Name)
			}
		}
	})
}

// sensitiveKey returns a key Sensitive names anywhere in v below its top level's labels and
// annotations (which are kept as Rancher has them), or "".
func sensitiveKey(v any) string {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if k == "labels" || k == "annotations" {
				continue
			}
			if Sensitive(k) {
				return k
			}
			if s := sensitiveKey(x); s != "" {
				return s
			}
		}
	case []any:
		for _, x := range t {
			if s := sensitiveKey(x); s != "" {
				return s
			}
		}
	}
	return ""
}
