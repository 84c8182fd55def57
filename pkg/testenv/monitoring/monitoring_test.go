package monitoring

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
		err  string
	}{
		{expr: `up`, want: []string{"up"}},
		{expr: `sum by (kind, result) (rate(a_total{kind=~"$kind"}[$__rate_interval]))`, want: []string{"a_total"}},
		{expr: `histogram_quantile(0.95, sum by (le) (rate(x_seconds_bucket[5m])))`, want: []string{"x_seconds_bucket"}},
		{expr: `a > 0 unless on (kind) group_left (source) b offset 5m`, want: []string{"a", "b"}},
		{expr: `label_replace(max(a) > 1e3, "service", "x-y", "", "") or vector(0)`, want: []string{"a"}},
		{expr: `{__name__="a_total", job="x"} / ignoring(x) c[1h:5m] # a comment naming d`, want: []string{"a_total", "c"}},
		{expr: `count_values("v", b) and bool c @ start()`, want: []string{"b", "c"}},
		{expr: `rat(a[5m])`, err: "unknown function rat"},
		{expr: `sum(rate(a[5m])`, err: "unclosed"},
		{expr: `sum(a))`, err: "unexpected )"},
		{expr: `a{kind="x}`, err: "unterminated string"},
		{expr: `{__name__=~"a.*"}`, err: "must be matched exactly"},
		{expr: `a[5 minutes]`, err: "bad duration"},
		{expr: `vector(1)`, err: "no metric"},
		{expr: `a{kind=x}`, err: "value must be a string"},
	} {
		got, err := MetricNames(tc.expr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("MetricNames(%q) = %v, %v; want error %q", tc.expr, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("MetricNames(%q) = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
}

// TestEveryQueriedMetricIsChecked: every metric the dashboards and alerts query belongs to a
// service (enforcement_<service>_, the service a folder of services/), and that service's tests
// check it against the registry it serves (CheckExported). A name of no service, or a service
// whose tests do not check, fails here, so nothing the files query escapes the check.
func TestEveryQueriedMetricIsChecked(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := os.ReadDir(filepath.Join(root, "services"))
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string]bool{} // service -> its tests call CheckExported
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		tests, _ := filepath.Glob(filepath.Join(root, "services", d.Name(), "*_test.go"))
		checks[d.Name()] = false
		for _, f := range tests {
			if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), "monitoring.CheckExported(t, serviceName") {
				checks[d.Name()] = true
			}
		}
	}
	queries := Load(t)
	for _, name := range Names(queries) {
		owner := ""
		for svc := range checks {
			if strings.HasPrefix(name, Prefix(svc)) && len(Prefix(svc)) > len(Prefix(owner)) {
				owner = svc
			}
		}
		switch {
		case owner == "":
			t.Errorf("%s is queried but is no service's metric (enforcement_<service>_...)", name)
		case !checks[owner]:
			t.Errorf("%s is queried but %s's tests do not check its registry (monitoring.CheckExported)", name, owner)
		}
	}
	if len(queries) < 20 {
		t.Errorf("only %d queries found", len(queries))
	}
}

// TestCheckExportedFindsMissingMetrics: CheckExported reports a queried name the registry does
// not describe, and accepts an unobserved vector and a histogram's _bucket series.
func TestCheckExportedFindsMissingMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "enforcement_rule_engine_intents_published_total", Help: "h"}, []string{"kind", "reason"}))
	have := described(reg)
	if !exported(have, "enforcement_rule_engine_intents_published_total") {
		t.Error("an unobserved vector is not described")
	}
	if exported(have, "enforcement_rule_engine_rules") {
		t.Error("a missing metric counts as exported")
	}
	reg.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "enforcement_rule_engine_x_seconds", Help: "h"}))
	if !exported(described(reg), "enforcement_rule_engine_x_seconds_bucket") {
		t.Error("a histogram's _bucket series is not its family's")
	}
	rec := &recordingT{TB: t}
	if n := CheckExported(rec, "rule-engine", reg); n == 0 || len(rec.errors) == 0 {
		t.Errorf("CheckExported against a partial registry: %d checked, errors %q", n, rec.errors)
	}
}

// recordingT keeps the errors of a check instead of failing the test.
type recordingT struct {
	testing.TB
	errors []string
}

func (r *recordingT) Errorf(format string, args ...any) {
	r.errors = append(r.errors, format)
}

// TestAlertRules: every alert is named Enforcement…, has a severity an Alertmanager route can
// use, a summary and a description, and a valid "for".
func TestAlertRules(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, AlertsDir, "*.yaml"))
	names := map[string]bool{}
	for _, f := range files {
		for _, a := range LoadAlerts(t, f) {
			if !strings.HasPrefix(a.Alert, "Enforcement") || names[a.Alert] {
				t.Errorf("alert %q: want a unique name starting with Enforcement", a.Alert)
			}
			names[a.Alert] = true
			if !slices.Contains([]string{"info", "warning", "critical"}, a.Labels["severity"]) {
				t.Errorf("alert %s: severity %q", a.Alert, a.Labels["severity"])
			}
			if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
				t.Errorf("alert %s: summary and description annotations are required", a.Alert)
			}
			if a.For != "" {
				if _, err := ParseDuration(a.For); err != nil {
					t.Errorf("alert %s: for: %v", a.Alert, err)
				}
			}
		}
	}
	for _, want := range []string{"EnforcementDeadLetters", "EnforcementSourceDegraded", "EnforcementSourceRemovalsHeld", "EnforcementRuleRemovalsHeld", "EnforcementRolloutHalted"} {
		if !names[want] {
			t.Errorf("no alert %s", want)
		}
	}
}
