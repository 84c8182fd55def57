package gke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke/gkefake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner/scannertest"
)

func newTestLister(t testing.TB, f *gkefake.Server, mod func(*Options)) (*Lister, *prometheus.CounterVec) {
	t.Helper()
	creds, err := events.ParseGKESecret(map[string][]byte{events.SecretKeyGCPServiceAccount: f.KeyJSON(t)})
	if err != nil {
		t.Fatal(err)
	}
	calls := NewCallsCounter(prometheus.NewRegistry())
	opts := Options{
		Projects:    []string{"proj-a"},
		Credentials: func(context.Context) (Credentials, error) { return creds, nil },
		Endpoint:    f.URL + "/",
		Backoff:     time.Millisecond,
		Calls:       calls,
	}
	if mod != nil {
		mod(&opts)
	}
	return NewLister(opts), calls
}

func names(clusters []events.Cluster) []string {
	out := make([]string, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, c.Name)
	}
	sort.Strings(out)
	return out
}

func TestValidateFilters(t *testing.T) {
	tests := []struct {
		filters map[string]string
		wantErr string
	}{
		{filters: nil},
		{filters: map[string]string{"location": "europe-*", "resourceLabels.env": "prod", "status": "RUNNING", "autopilot.enabled": "true"}},
		{filters: map[string]string{"labels.env": "prod"}, wantErr: `unsupported key "labels.env"`},
		{filters: map[string]string{"resourceLabels.": "x"}, wantErr: `unsupported key "resourceLabels."`},
		{filters: map[string]string{"nodePools.name": "x"}, wantErr: `unsupported key "nodePools.name"`},
		{filters: map[string]string{"name": "[a-"}, wantErr: `key "name": pattern "[a-" is not a valid glob`},
	}
	for _, tt := range tests {
		err := ValidateFilters(tt.filters)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("ValidateFilters(%v) = %v, want %q", tt.filters, err, tt.wantErr)
		}
	}
}

func TestEligible(t *testing.T) {
	for status, want := range map[string]bool{
		"RUNNING": true, "RECONCILING": true, "PROVISIONING": false, "DEGRADED": false, "ERROR": false, "STOPPING": false, "": false,
	} {
		if Eligible(status) != want {
			t.Errorf("Eligible(%q) != %t", status, want)
		}
	}
}

// TestListShapeAndToken lists two projects through the real client: the key's JWT is exchanged
// once at the fake token endpoint, the bearer token is sent, and clusters have their shape.
func TestListShapeAndToken(t *testing.T) {
	f := gkefake.New(t)
	f.Add("proj-a", "europe-west1", "prod", "RUNNING", map[string]string{"env": "prod"})
	f.Add("proj-a", "europe-west1-b", "building", "PROVISIONING", nil)
	f.Add("proj-b", "us-central1", "reconciling", "RECONCILING", nil)
	f.Add("proj-b", "us-central1", "broken", "ERROR", nil)
	l, calls := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-b", "proj-a"} })

	clusters := scannertest.ListOK(t, l)
	if got := names(clusters); strings.Join(got, ",") != "broken,building,prod,reconciling" {
		t.Fatalf("names = %v", got)
	}
	scannertest.ListOK(t, l)
	if f.Issued != 1 {
		t.Errorf("tokens issued = %d, want 1 (the client keeps its token between scans)", f.Issued)
	}
	if f.Lists["proj-a"] != 2 || f.Lists["proj-b"] != 2 {
		t.Errorf("lists = %v, want one per project and scan", f.Lists)
	}
	if got := testutil.ToFloat64(calls.WithLabelValues("ListClusters", "success")); got != 4 {
		t.Errorf("counted successes = %v, want 4", got)
	}

	eligible := map[string]bool{}
	var prod events.Cluster
	for _, c := range clusters {
		eligible[c.Name] = c.Eligible
		if c.Name == "prod" {
			prod = c
		}
	}
	if want := map[string]bool{"prod": true, "reconciling": true, "building": false, "broken": false}; fmt.Sprint(eligible) != fmt.Sprint(want) {
		t.Errorf("eligible = %v, want %v", eligible, want)
	}
	if prod.Key != "projects/proj-a/locations/europe-west1/clusters/prod" || prod.URL != "https://34.1.0.4" ||
		prod.State != "RUNNING" || prod.Labels["env"] != "prod" {
		t.Errorf("prod = %+v", prod)
	}
	a := prod.Attributes
	for k, v := range map[string]any{
		"name": "prod", "url": "https://34.1.0.4", "location": "europe-west1", "project": "proj-a",
		"currentMasterVersion": "1.30.5-gke.1014001", "status": "RUNNING", "network": "default",
		"selfLink":               "https://container.googleapis.com/v1/projects/proj-a/locations/europe-west1/clusters/prod",
		AttrArgoCDExecCommand:    "argocd-k8s-auth",
		AttrArgoCDExecAPIVersion: "client.authentication.k8s.io/v1beta1",
	} {
		if a[k] != v {
			t.Errorf("attribute %s = %#v, want %#v", k, a[k], v)
		}
	}
	if a["id"] == "" || a["id"] == nil {
		t.Errorf("attribute id is empty")
	}
	if rl, _ := a["resourceLabels"].(map[string]any); rl["env"] != "prod" {
		t.Errorf("attribute resourceLabels = %#v", a["resourceLabels"])
	}
	if rc, _ := a["releaseChannel"].(map[string]any); rc["channel"] != "REGULAR" {
		t.Errorf("attribute releaseChannel = %#v", a["releaseChannel"])
	}
	if ca, _ := a[AttrArgoCDCAData].(string); !strings.HasPrefix(ca, "LS0tLS1CRUdJTi") {
		t.Errorf("attribute %s = %q", AttrArgoCDCAData, ca)
	}
	if args, _ := a[AttrArgoCDExecArgs].([]any); len(args) != 1 || args[0] != "gcp" {
		t.Errorf("attribute %s = %#v", AttrArgoCDExecArgs, a[AttrArgoCDExecArgs])
	}
	for _, k := range VolatileFields {
		if _, ok := a[k]; ok {
			t.Errorf("volatile attribute %s is set", k)
		}
	}
	if b, _ := json.Marshal(clusters); strings.Contains(string(b), "legacy-basic-auth-password") {
		t.Error("the masterAuth password reached the clusters")
	}
}

// TestFilters: gcloud-style dotted keys with globs; all must match.
func TestFilters(t *testing.T) {
	f := gkefake.New(t)
	f.Add("proj-a", "europe-west1", "prod-eu", "RUNNING", map[string]string{"env": "prod"})
	f.Add("proj-a", "europe-west4-a", "dev-eu", "RUNNING", map[string]string{"env": "dev"})
	f.Add("proj-a", "us-central1", "prod-us", "RUNNING", map[string]string{"env": "prod"})
	f.Add("proj-a", "us-central1", "autopilot-1", "PROVISIONING", nil)
	f.Add("proj-b", "europe-west1", "other", "RUNNING", map[string]string{"env": "prod"})
	tests := []struct {
		filters map[string]string
		want    string
	}{
		{nil, "autopilot-1,dev-eu,other,prod-eu,prod-us"},
		{map[string]string{"location": "europe-*"}, "dev-eu,other,prod-eu"},
		{map[string]string{"location": "europe-west?"}, "other,prod-eu"},
		{map[string]string{"resourceLabels.env": "prod"}, "other,prod-eu,prod-us"},
		{map[string]string{"resourceLabels.env": "*"}, "dev-eu,other,prod-eu,prod-us"},
		{map[string]string{"resourceLabels.env": "prod", "location": "us-*"}, "prod-us"},
		{map[string]string{"status": "RUNNING", "name": "*-eu"}, "dev-eu,prod-eu"},
		{map[string]string{"autopilot.enabled": "true"}, "autopilot-1"},
		{map[string]string{"project": "proj-b"}, "other"},
		{map[string]string{"currentMasterVersion": "1.30.*"}, "autopilot-1,dev-eu,other,prod-eu,prod-us"},
		{map[string]string{"releaseChannel.channel": "[RS]*"}, "autopilot-1,dev-eu,other,prod-eu,prod-us"},
		{map[string]string{"name": "nothing"}, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.filters), func(t *testing.T) {
			l, _ := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-a", "proj-b"}; o.Filters = tt.filters })
			if got := strings.Join(names(scannertest.ListOK(t, l)), ","); got != tt.want {
				t.Fatalf("listed %q, want %q", got, tt.want)
			}
		})
	}
	l, _ := newTestLister(t, f, func(o *Options) { o.Filters = map[string]string{"labels.env": "prod"} })
	_, err := l.List(context.Background())
	if scanner.ReasonOf(err) != events.DegradedInvalidSpec || !strings.Contains(err.Error(), `"labels.env"`) {
		t.Fatalf("unsupported filter: %v", err)
	}
}

// TestFilterExpression: gcloud filter expressions through the real client against the fake, with
// the map form still applying alongside; an invalid expression is InvalidSpec naming the field
// and the position, never an empty (or full) listing.
func TestFilterExpression(t *testing.T) {
	f := gkefake.New(t)
	f.Add("proj-a", "europe-west1", "prod-eu", "RUNNING", map[string]string{"env": "prod"})
	f.Add("proj-a", "europe-west4-a", "dev-eu", "RUNNING", map[string]string{"env": "dev"})
	f.Add("proj-a", "us-central1", "prod-us", "RUNNING", map[string]string{"env": "prod"})
	f.Add("proj-a", "us-central1", "autopilot-1", "PROVISIONING", nil)
	tests := []struct {
		expr    string
		filters map[string]string
		want    string
	}{
		{"status=RUNNING AND resourceLabels.env=prod", nil, "prod-eu,prod-us"},
		{"(location:europe* OR status=PROVISIONING) -resourceLabels.env=dev", nil, "autopilot-1,prod-eu"},
		{"NOT resourceLabels.env:*", nil, "autopilot-1"},
		{"name ~ ^prod- location !~ ^us", nil, "prod-eu"},
		{"location=(us-central1 europe-west4-a)", nil, "autopilot-1,dev-eu,prod-us"},
		{"autopilot.enabled=true OR name:dev", nil, "autopilot-1,dev-eu"},
		// With the map form: both must match.
		{"resourceLabels.env=prod", map[string]string{"location": "us-*"}, "prod-us"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			l, _ := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-a"}; o.Filter = tt.expr; o.Filters = tt.filters })
			if got := strings.Join(names(scannertest.ListOK(t, l)), ","); got != tt.want {
				t.Fatalf("listed %q, want %q", got, tt.want)
			}
		})
	}
	l, _ := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-a"}; o.Filter = "status=RUNNING AND name:a OR name:b" })
	_, err := l.List(context.Background())
	if scanner.ReasonOf(err) != events.DegradedInvalidSpec || !strings.Contains(err.Error(), "gke.filter") || !strings.Contains(err.Error(), "*HERE*") {
		t.Fatalf("invalid expression: %v", err)
	}
}

// TestFailures: every failure (and a partial answer) makes the whole listing an error with the
// right reason.
func TestFailures(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(f *gkefake.Server)
		projects   []string
		timeout    time.Duration
		wantReason string
		wantMsg    string
		wantLists  int // list requests to proj-a (0: not checked)
	}{
		{name: "missing zones", setup: func(f *gkefake.Server) { f.Missing["proj-a"] = []string{"us-east1-c", "europe-west1-b"} },
			wantReason: events.DegradedPartial, wantMsg: "misses zones europe-west1-b, us-east1-c"},
		{name: "permission denied", setup: func(f *gkefake.Server) {
			f.Fail["proj-a"] = gkefake.Error{Code: 403, Status: "PERMISSION_DENIED", Msg: "Required 'container.clusters.list' permission for 'projects/proj-a'."}
		}, wantReason: events.DegradedUnauthorized, wantMsg: "container.clusters.list", wantLists: 1},
		{name: "token not accepted", setup: func(f *gkefake.Server) { f.RejectTokens = true },
			wantReason: events.DegradedUnauthorized, wantMsg: "401"},
		{name: "token refused", setup: func(f *gkefake.Server) { f.RefuseGrant = true },
			wantReason: events.DegradedUnauthorized, wantMsg: "invalid_grant"},
		{name: "throttled beyond the retries", setup: func(f *gkefake.Server) {
			f.Fail["proj-a"] = gkefake.Error{Code: 429, Status: "RESOURCE_EXHAUSTED", Msg: "Quota exceeded for quota metric 'Read requests'."}
		}, wantReason: events.DegradedListFailed, wantMsg: "Quota exceeded", wantLists: 4},
		{name: "server error", setup: func(f *gkefake.Server) {
			f.Fail["proj-a"] = gkefake.Error{Code: 503, Status: "UNAVAILABLE", Msg: "The service is currently unavailable."}
		},
			wantReason: events.DegradedListFailed, wantMsg: "503", wantLists: 4},
		{name: "one project of two fails", projects: []string{"proj-a", "proj-b"}, setup: func(f *gkefake.Server) {
			f.Fail["proj-b"] = gkefake.Error{Code: 500, Status: "INTERNAL", Msg: "Internal error."}
		}, wantReason: events.DegradedPartial, wantMsg: "project proj-b"},
		{name: "not found project", setup: func(f *gkefake.Server) {
			f.Fail["proj-a"] = gkefake.Error{Code: 404, Status: "NOT_FOUND", Msg: "Project not found."}
		},
			wantReason: events.DegradedListFailed, wantMsg: "Project not found", wantLists: 1},
		{name: "timeout", setup: func(f *gkefake.Server) { f.Delay = 5 * time.Second }, timeout: 300 * time.Millisecond,
			wantReason: events.DegradedListFailed, wantMsg: "deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := gkefake.New(t)
			f.Add("proj-a", "europe-west1", "a", "RUNNING", nil)
			f.Add("proj-b", "europe-west1", "b", "RUNNING", nil)
			f.Configure(tt.setup)
			l, _ := newTestLister(t, f, func(o *Options) {
				if tt.projects != nil {
					o.Projects = tt.projects
				}
			})
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			clusters, err := l.List(ctx)
			if err == nil || clusters != nil {
				t.Fatalf("List = %d clusters, %v; want an error only", len(clusters), err)
			}
			t.Logf("error: %v", err)
			if got := scanner.ReasonOf(err); got != tt.wantReason {
				t.Errorf("reason = %s, want %s (%v)", got, tt.wantReason, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), f.Token) {
				t.Errorf("error shows a secret: %v", err)
			}
			if tt.wantLists > 0 && f.Lists["proj-a"] != tt.wantLists {
				t.Errorf("list requests = %d, want %d", f.Lists["proj-a"], tt.wantLists)
			}
		})
	}
}

// TestRetriedThenComplete: a 429 then a 200 is a complete listing, counted as one throttled and
// one successful call.
func TestRetriedThenComplete(t *testing.T) {
	f := gkefake.New(t)
	f.Add("proj-a", "europe-west1", "a", "RUNNING", nil)
	f.Configure(func(f *gkefake.Server) {
		f.Fail["proj-a#once"] = gkefake.Error{Code: 429, Status: "RESOURCE_EXHAUSTED", Msg: "Quota exceeded."}
		f.FailN["proj-a"] = 1
	})
	l, calls := newTestLister(t, f, nil)
	if got := len(scannertest.ListOK(t, l)); got != 1 {
		t.Fatalf("listed %d", got)
	}
	if testutil.ToFloat64(calls.WithLabelValues("ListClusters", "throttled")) != 1 || testutil.ToFloat64(calls.WithLabelValues("ListClusters", "success")) != 1 {
		t.Fatalf("calls not counted as throttled + success")
	}
}

// TestProjectDefaultsAndErrors: no project falls back to the key's project_id; the Credentials
// callback's error comes back unchanged.
func TestProjectDefaultsAndErrors(t *testing.T) {
	f := gkefake.New(t)
	f.Add("proj-a", "europe-west1", "a", "RUNNING", nil)
	l, _ := newTestLister(t, f, func(o *Options) { o.Projects = nil })
	if got := names(scannertest.ListOK(t, l)); len(got) != 1 {
		t.Fatalf("names = %v", got)
	}
	want := scanner.Degradedf(events.DegradedSecretInvalid, "Secret ns/gke not found")
	l, _ = newTestLister(t, f, func(o *Options) {
		o.Credentials = func(context.Context) (Credentials, error) { return Credentials{}, want }
	})
	if _, err := l.List(context.Background()); !errors.Is(err, want) {
		t.Fatalf("err = %v", err)
	}
}

// TestApplicationDefaultCredentials: without a Secret the client finds its credentials the
// application-default way (here GOOGLE_APPLICATION_CREDENTIALS naming a key file).
func TestApplicationDefaultCredentials(t *testing.T) {
	f := gkefake.New(t)
	f.Add("proj-a", "europe-west1", "adc", "RUNNING", nil)
	file := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(file, f.KeyJSON(t), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	l, _ := newTestLister(t, f, func(o *Options) { o.Credentials = nil })
	if got := names(scannertest.ListOK(t, l)); len(got) != 1 || got[0] != "adc" {
		t.Fatalf("names = %v", got)
	}
	if f.Issued != 1 {
		t.Fatalf("tokens issued = %d", f.Issued)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewCallsCounter(reg).WithLabelValues("ListClusters", "success").Inc()
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// TestRequestsPerScan counts the Google calls of scans of 1,000 clusters in three projects:
// the container API answers a project's clusters of every location in one unpaged list, so a
// scan costs one ListClusters per project whatever the fleet's size, and the OAuth token is
// fetched once, at the first scan.
func TestRequestsPerScan(t *testing.T) {
	f := gkefake.New(t)
	projects := []string{"proj-a", "proj-b", "proj-c"}
	for i := range 1000 {
		f.Add(projects[i%3], []string{"europe-west1", "us-central1-a"}[i%2], fmt.Sprintf("fleet-%04d", i), "RUNNING", nil)
	}
	l, calls := newTestLister(t, f, func(o *Options) { o.Projects = projects })
	for scan := 1; scan <= 3; scan++ {
		if got := len(scannertest.ListOK(t, l)); got != 1000 {
			t.Fatalf("scan %d listed %d clusters, want 1000", scan, got)
		}
		var lists int
		f.Configure(func(f *gkefake.Server) {
			for _, p := range projects {
				if f.Lists[p] != scan {
					t.Errorf("after scan %d: %d lists of %s, want one per scan", scan, f.Lists[p], p)
				}
				lists += f.Lists[p]
			}
			if f.Issued != 1 {
				t.Errorf("after scan %d: %d tokens issued, want 1", scan, f.Issued)
			}
		})
		if got := testutil.ToFloat64(calls.WithLabelValues("ListClusters", "success")); got != float64(lists) {
			t.Errorf("after scan %d: counted ListClusters = %v, want %d", scan, got, lists)
		}
	}
}
