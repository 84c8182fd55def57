package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv/compat"
	"sigs.k8s.io/yaml"
)

// examples is the folder of the compatibility suite (pkg/testenv/compat) that holds the
// original operator's ClusterRules and Secrets.
const examples = "enforcement/"

// loadExampleRule reads one ClusterRule manifest of the original operator from the
// compatibility suite.
func loadExampleRule(t testing.TB, file string) *v1beta1.ClusterRule {
	t.Helper()
	b := compat.Manifest(t, examples+file)
	var cr v1beta1.ClusterRule
	if err := yaml.Unmarshal(b, &cr); err != nil {
		t.Fatalf("decode %s: %v", file, err)
	}
	return &cr
}

func cluster(name string, labels map[string]string) events.Cluster {
	return events.Cluster{
		Source: events.SourceRef{Kind: "rancher", ID: events.SourceID("rancher", "enforcement", "rancher", nil)},
		Key:    "c-" + name, Name: name, URL: "https://rancher.example/k8s/clusters/c-" + name,
		Labels: labels, State: "active", Eligible: true,
		Attributes: map[string]any{"genericConfig": map[string]any{"driverName": "gke"}, "agentImage": "rancher/agent:v2"},
	}
}

func TestDynamicRuleRendersAsTheReadmeSays(t *testing.T) {
	cr := loadExampleRule(t, "readme-02-dynamic-rule-jinja.yaml")
	compiled := compile(cr.Spec.Enforcements)
	if !compiled.templated {
		t.Fatal("dynamic rule not seen as templated")
	}
	r := newRenderer(nil, time.Second)
	c1 := cluster("cluster1", nil)
	got, err := r.render(context.Background(), compiled, templateVars(&c1))
	if err != nil {
		t.Fatal(err)
	}
	want := events.Enforcement{
		Name: "guestbook-cluster1", Repo: "https://github.com/argoproj/argocd-example-apps",
		Path: "helm-guestbook", Namespace: "cluster1",
		HelmParameters: []events.HelmParameter{{Name: "clusterURL", Value: c1.URL}, {Name: "replicaCount", Value: "10"}},
	}
	if g, w := mustJSON(t, got), mustJSON(t, []events.Enforcement{want}); g != w {
		t.Errorf("cluster1 render:\n got %s\nwant %s", g, w)
	}
	c2 := cluster("cluster7", nil)
	other, err := r.render(context.Background(), compiled, templateVars(&c2))
	if err != nil {
		t.Fatal(err)
	}
	if other[0].Name != "guestbook-other" || other[0].Namespace != "cluster7" {
		t.Errorf("other cluster: name %q namespace %q, want guestbook-other, cluster7", other[0].Name, other[0].Namespace)
	}
}

func TestLiteralRuleRendersHelmValuesAsStrings(t *testing.T) {
	cr := loadExampleRule(t, "readme-01-dev-rules.yaml")
	compiled := compile(cr.Spec.Enforcements)
	if compiled.templated {
		t.Fatal("literal rule seen as templated")
	}
	got, err := (&Renderer{}).render(context.Background(), compiled, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].HelmParameters[0] != (events.HelmParameter{Name: "replicaCount", Value: "1"}) {
		t.Errorf("render = %s", mustJSON(t, got))
	}
	if got[1].Namespace != "default" {
		t.Errorf("namespace default: got %q", got[1].Namespace)
	}
}

func TestRenderFields(t *testing.T) {
	c := cluster("prod-1", map[string]string{"env": "prod"})
	tests := []struct {
		name    string
		enf     v1beta1.Enforcement
		want    string // JSON of the rendered enforcement
		wantErr string
	}{
		{name: "source attributes and id",
			enf:  v1beta1.Enforcement{Name: "${{ genericConfig['driverName'] }}-app", Repo: "r", Path: "${{ id }}/x", TargetRevision: " ${{ agentImage.split(':')[1] }} "},
			want: `{"name":"gke-app","repo":"r","path":"c-prod-1/x","namespace":"default","targetRevision":"v2"}`},
		{name: "labels keys and values",
			enf:  v1beta1.Enforcement{Name: "a", Repo: "r", Labels: map[string]string{"cluster": "${{ name }}", "${{ 'k' ~ 1 }}": "v"}},
			want: `{"name":"a","repo":"r","path":"","namespace":"default","labels":{"cluster":"prod-1","k1":"v"}}`},
		{name: "helm booleans and strings",
			enf: v1beta1.Enforcement{Name: "a", Repo: "r", Helm: &v1beta1.Helm{Parameters: map[string]jsonValue{
				"enabled": raw(`true`), "ratio": raw(`1.5`), "who": raw(`"${{ name|upper }}"`)}}},
			want: `{"name":"a","repo":"r","path":"","namespace":"default","helmParameters":[{"name":"enabled","value":"true"},{"name":"ratio","value":"1.5"},{"name":"who","value":"PROD-1"}]}`},
		{name: "syntax error", enf: v1beta1.Enforcement{Name: "${{ name ", Repo: "r"}, wantErr: "enforcements[0].name: parse template"},
		{name: "empty name", enf: v1beta1.Enforcement{Name: "${{ missing }}", Repo: "r"}, wantErr: "name renders empty"},
		{name: "no network by default", enf: v1beta1.Enforcement{Name: "a", Repo: "${{ requests.get('https://x.example/').json() }}"},
			wantErr: "requests.get is disabled: set TEMPLATE_HTTP_ALLOW"},
		{name: "no file include", enf: v1beta1.Enforcement{Name: "a", Repo: "${% include '/etc/passwd' %}"}, wantErr: "unknown path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := newRenderer(nil, time.Second).render(context.Background(), compile([]v1beta1.Enforcement{tt.enf}), templateVars(&c))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := mustJSON(t, got[0]); g != tt.want {
				t.Errorf("got  %s\nwant %s", g, tt.want)
			}
		})
	}
}

func TestDuplicateRenderedNamesFail(t *testing.T) {
	c := cluster("x", nil)
	_, err := newRenderer(nil, time.Second).render(context.Background(), compile([]v1beta1.Enforcement{
		{Name: "${{ 'app' }}", Repo: "r"}, {Name: "app", Repo: "r"}}), templateVars(&c))
	if err == nil || !strings.Contains(err.Error(), `both render the name "app"`) {
		t.Fatalf("error = %v", err)
	}
}

func TestRequestsGetOnlyOnAllowedHosts(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "http://elsewhere.example/", http.StatusFound)
			return
		}
		_, _ = w.Write([]byte(`{"uuid":"6a1c"}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	enf := []v1beta1.Enforcement{{Name: "guestbook", Repo: "r", Helm: &v1beta1.Helm{Parameters: map[string]jsonValue{
		"uuid": raw(`"${{ requests.get('` + srv.URL + `/uuid').json()['uuid'] }}"`)}}}}
	c := cluster("x", nil)

	r := newRenderer([]string{u.Hostname()}, time.Second)
	r.useEgress(loopbackOpen) // the test server listens on loopback
	got, err := r.render(context.Background(), compile(enf), templateVars(&c))
	if err != nil {
		t.Fatal(err)
	}
	if v := got[0].HelmParameters[0].Value; v != "6a1c" {
		t.Errorf("uuid = %q", v)
	}
	_, err = newRenderer([]string{"other.example"}, time.Second).render(context.Background(), compile(enf), templateVars(&c))
	if err == nil || !strings.Contains(err.Error(), "not in TEMPLATE_HTTP_ALLOW") {
		t.Errorf("disallowed host: error = %v", err)
	}
	away := []v1beta1.Enforcement{{Name: "a", Repo: "${{ requests.get('" + srv.URL + "/away').text }}"}}
	_, err = r.render(context.Background(), compile(away), templateVars(&c))
	if err == nil || !strings.Contains(err.Error(), `redirect to host "elsewhere.example"`) {
		t.Errorf("redirect away: error = %v", err)
	}
	if calls.Load() != 2 {
		t.Errorf("server called %d times, want 2", calls.Load())
	}
}

func TestSpecHashChangesWithRenderAndURL(t *testing.T) {
	e := events.Enforcement{Name: "a", Repo: "r", Namespace: "default"}
	h := specHash(&e, "https://a")
	if specHash(&e, "https://a") != h {
		t.Error("not deterministic")
	}
	if specHash(&e, "https://b") == h {
		t.Error("URL change kept the hash")
	}
	e.Path = "p"
	if specHash(&e, "https://a") == h {
		t.Error("spec change kept the hash")
	}
}

type jsonValue = apiextensionsJSON

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
