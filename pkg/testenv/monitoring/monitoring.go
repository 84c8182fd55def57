package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

// Where the monitoring files live, relative to the repository root.
const (
	DashboardDir = "deploy/grafana"    // Grafana dashboards (*.json)
	AlertsDir    = "deploy/prometheus" // Prometheus rule files (*.yaml)
)

// Query is one PromQL expression of a dashboard or rule file.
type Query struct {
	File    string   // relative to the repository root
	Where   string   // panel title and target, or alert name
	Expr    string   // as written
	Metrics []string // the metric names it selects
}

func (q Query) String() string { return q.File + ": " + q.Where }

// Alert is one alerting rule of a Prometheus rule file.
type Alert struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// ruleFile is the Prometheus rule file format (the spec of a PrometheusRule too).
type ruleFile struct {
	Groups []struct {
		Name  string  `json:"name"`
		Rules []Alert `json:"rules"`
	} `json:"groups"`
}

// Load reads every query of the dashboards and alert rules, or fails the test with the first
// file that cannot be read and every expression that does not scan.
func Load(t testing.TB) []Query {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var queries []Query
	var errs []string
	add := func(file, where, expr string) {
		names, err := MetricNames(expr)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %s: %v", file, where, err))
			return
		}
		queries = append(queries, Query{File: file, Where: where, Expr: expr, Metrics: names})
	}
	dashboards, _ := filepath.Glob(filepath.Join(root, DashboardDir, "*.json"))
	alerts, _ := filepath.Glob(filepath.Join(root, AlertsDir, "*.yaml"))
	if len(dashboards) == 0 || len(alerts) == 0 {
		t.Fatalf("no dashboard in %s or no rule file in %s", DashboardDir, AlertsDir)
	}
	for _, path := range dashboards {
		rel, _ := filepath.Rel(root, path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		walkDashboard(d, "", func(where, expr string) { add(rel, where, expr) })
	}
	for _, path := range alerts {
		rel, _ := filepath.Rel(root, path)
		for _, a := range LoadAlerts(t, path) {
			add(rel, "alert "+a.Alert, a.Expr)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("queries that do not scan:\n%s", strings.Join(errs, "\n"))
	}
	return queries
}

// LoadAlerts reads the alerting rules of a rule file (failing the test on a malformed one).
func LoadAlerts(t testing.TB, path string) []Alert {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []Alert
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// labelValues is a Grafana templating query over a metric: label_values(<selector>, <label>).
var labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// walkDashboard calls query for every PromQL expression of a Grafana dashboard: panel targets
// (rows' nested panels included) and templating variables (label_values(<selector>, <label>),
// or a plain expression).
func walkDashboard(node any, where string, query func(where, expr string)) {
	switch n := node.(type) {
	case map[string]any:
		if title, ok := n["title"].(string); ok {
			where = strings.TrimPrefix(where+" / "+title, " / ")
		}
		if expr, ok := n["expr"].(string); ok {
			ref, _ := n["refId"].(string)
			query(where+" ["+ref+"]", expr)
		}
		if n["type"] == "query" { // a templating variable
			name, _ := n["name"].(string)
			q := n["query"]
			if m, ok := q.(map[string]any); ok {
				q = m["query"]
			}
			if s, ok := q.(string); ok {
				if m := labelValues.FindStringSubmatch(s); m != nil {
					s = m[1]
				}
				query("variable $"+name, s)
			}
		}
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k != "query" {
				walkDashboard(n[k], where, query)
			}
		}
	case []any:
		for _, v := range n {
			walkDashboard(v, where, query)
		}
	}
}

// described returns the metric names a registry describes, unobserved vectors included (their
// descriptors exist from registration on, before any sample).
func described(reg *prometheus.Registry) map[string]bool {
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// Prefix is the metric name prefix of a service: enforcement_<service with '_' for '-'>_.
func Prefix(service string) string {
	return "enforcement_" + strings.ReplaceAll(service, "-", "_") + "_"
}

// CheckExported fails the test for every metric of service (by its Prefix) that a dashboard or
// alert queries and reg does not describe. Histogram and summary series (_bucket, _sum,
// _count) count as their family's. It returns how many queried names it checked.
func CheckExported(t testing.TB, service string, reg *prometheus.Registry) int {
	t.Helper()
	have := described(reg)
	checked := 0
	for _, q := range Load(t) {
		for _, name := range q.Metrics {
			if !strings.HasPrefix(name, Prefix(service)) {
				continue
			}
			checked++
			if !exported(have, name) {
				t.Errorf("%s queries %s, which %s does not export", q, name, service)
			}
		}
	}
	return checked
}

func exported(have map[string]bool, name string) bool {
	if have[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && have[base] {
			return true
		}
	}
	return false
}

// ParseDuration parses a Prometheus duration ("5m", "1h30m", "2d").
func ParseDuration(s string) (time.Duration, error) {
	re := regexp.MustCompile(`^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$`)
	m := re.FindStringSubmatch(s)
	if s == "" || m == nil {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	units := []time.Duration{365 * 24 * time.Hour, 7 * 24 * time.Hour, 24 * time.Hour, time.Hour, time.Minute, time.Second, time.Millisecond}
	var d time.Duration
	for i, u := range units {
		var n int
		if m[i+1] != "" {
			if _, err := fmt.Sscan(m[i+1], &n); err != nil {
				return 0, fmt.Errorf("bad duration %q: %w", s, err)
			}
		}
		d += time.Duration(n) * u
	}
	return d, nil
}

// Names returns every metric name the queries select, sorted.
func Names(queries []Query) []string {
	var out []string
	for _, q := range queries {
		for _, n := range q.Metrics {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}
