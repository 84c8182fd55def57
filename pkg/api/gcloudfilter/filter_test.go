package gcloudfilter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// cluster is a GKE cluster object as the container API returns it (trimmed).
const cluster = `{
  "name": "prod-eu-1",
  "description": "Payments: production (EU)",
  "location": "europe-west1",
  "status": "RUNNING",
  "currentMasterVersion": "1.30.5-gke.1014001",
  "currentNodeCount": 12,
  "selfLink": "https://container.googleapis.com/v1/projects/p/locations/europe-west1/clusters/prod-eu-1",
  "createTime": "2024-03-01T10:00:00+00:00",
  "resourceLabels": {"env": "prod", "team": "payments"},
  "autopilot": {"enabled": false},
  "releaseChannel": {"channel": "REGULAR"},
  "locations": ["europe-west1-b", "europe-west1-c"],
  "nodePools": [
    {"name": "default", "config": {"machineType": "e2-standard-4"}},
    {"name": "gpu", "config": {"machineType": "a2-highgpu-1g"}}
  ]
}`

func resource(t *testing.T) map[string]any {
	t.Helper()
	var r map[string]any
	if err := json.Unmarshal([]byte(cluster), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMatches compares with the semantics `gcloud topic filters` documents; each case names the
// documented example it adapts (from compute instances or projects to a GKE cluster).
func TestMatches(t *testing.T) {
	r := resource(t)
	for _, tc := range []struct {
		expr string
		want bool
	}{
		// "key = simple-pattern": equality, case-insensitive, "*" globs.
		{"status=RUNNING", true},
		{"status = running", true},
		{"status=PROVISIONING", false},
		{"name=prod-*", true},
		{"name=*-1", true},
		{"name=prod", false},
		{`selfLink=*/clusters/prod-eu-1`, true},
		// "key =( simple-pattern ... )": any of the list.
		{"location=(us-central1 europe-west1)", true},
		{"location=(us-central1,us-east1)", false},
		// "key != simple-pattern" (same as -key=simple-pattern).
		{"status!=STOPPING", true},
		{"status!=RUNNING", false},
		{"resourceLabels.missing!=x", true},
		// "key : simple-pattern": has; whole value or any word, case-insensitive.
		{"description:payments", true},
		{"description:PRODUCTION", true},
		{"description:prod*", true},
		{"description:product", false},
		{"name:eu", true},
		// "labels.my-label:*": the label is set, with any value ("-labels.my-label:*": unset).
		{"resourceLabels.env:*", true},
		{"resourceLabels.owner:*", false},
		{"-resourceLabels.owner:*", true},
		{"resourceLabels:*", true},
		// "key :( simple-pattern ... )".
		{"resourceLabels.env:(staging prod)", true},
		{"resourceLabels.env:(dev test)", false},
		// "key ~ value" / "key !~ value": RE2 search, not anchored.
		{"currentMasterVersion ~ ^1\\.30\\.", true},
		{"currentMasterVersion ~ gke", true},
		{"currentMasterVersion !~ ^1\\.29", true},
		{"currentMasterVersion !~ gke", false},
		// "key < value" and friends: numeric when both are numbers, else text.
		{"currentNodeCount > 10", true},
		{"currentNodeCount >= 12", true},
		{"currentNodeCount < 9", false},
		{"currentNodeCount <= 12.0", true},
		{"createTime > 2024-01-01", true},
		{"createTime < 2024-01-01", false},
		// Booleans as true/false.
		{"autopilot.enabled=false", true},
		{"autopilot.enabled=true", false},
		// Dotted keys over the whole resource; a list matches when any element does.
		{"releaseChannel.channel=REGULAR", true},
		{"locations:europe-west1-c", true},
		{"nodePools.config.machineType=a2-*", true},
		{"nodePools.name=spot", false},
		// "NOT term", "-term", AND, OR, adjacency and parentheses.
		{"NOT status=RUNNING", false},
		{"-status=RUNNING", false},
		{"status=RUNNING AND resourceLabels.env=prod", true},
		{"status=RUNNING AND resourceLabels.env=dev", false},
		{"resourceLabels.env=dev OR resourceLabels.env=prod", true},
		{"status=RUNNING resourceLabels.team=payments", true},
		// Adjacency is the weakest: "a b OR c" is "a AND (b OR c)", as gcloud reads it.
		{"status=RUNNING resourceLabels.env=dev OR resourceLabels.team=payments", true},
		{"status=STOPPED resourceLabels.env=dev OR resourceLabels.team=payments", false},
		{"(status=STOPPED AND resourceLabels.env=prod) OR name=prod-eu-1", true},
		{"status=STOPPED AND (resourceLabels.env=prod OR name=prod-eu-1)", false},
		{"NOT (status=RUNNING AND autopilot.enabled=true)", true},
		// Quoted operands keep spaces and operator characters.
		{`description="Payments: production (EU)"`, true},
		{`description='payments: production (eu)'`, true},
		// An absent key matches nothing.
		{"zone=europe-west1-b", false},
		{"zone:*", false},
		{"", true},
	} {
		f, err := Compile(tc.expr)
		if err != nil {
			t.Errorf("Compile(%q): %v", tc.expr, err)
			continue
		}
		if got := f.Matches(r); got != tc.want {
			t.Errorf("%q: Matches = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

// TestCompileErrors shows the error a rule's author sees for each kind of invalid expression:
// the message says what is wrong and marks where.
func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"status=RUNNING AND name:a OR name:b", "AND and OR combined without parentheses"},
		{"status=RUNNING OR name:a AND name:b", "AND and OR combined without parentheses"},
		{"(status=RUNNING", "missing )"},
		{"status=RUNNING)", `unexpected ")"`},
		{"status", "operator expected after \"status\" (global restrictions are not supported)"},
		{"status=", "operand expected"},
		{"status= AND name:x", "operand expected after =, not a logical operator"},
		{"name.scope(zone):x", `transform or function "name.scope" is not supported`},
		{"date(createTime)>2020", `transform or function "date" is not supported`},
		{`name ~ "a(b"`, "invalid regular expression"},
		{"name ~ [a-", "invalid regular expression"},
		{`name="abc`, "unterminated string"},
		{"a..b=x", `key "a..b" has an empty segment`},
		{"nodePools[0].name=x", "list indexes are not supported"},
		{"AND name=x", "term expected before AND"},
		{"name=x AND", "term expected"},
		{"NOT", "term expected"},
		{"name!x", "malformed operator"},
		{"name=()", "empty operand list"},
		{"name=(a b", "missing ) in the operand list"},
	} {
		_, err := Compile(tc.expr)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Compile(%q) = %v, want a *SyntaxError", tc.expr, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "*HERE*") {
			t.Errorf("Compile(%q) error %q, want it to contain %q and mark the position", tc.expr, err, tc.want)
		}
	}
}

func BenchmarkMatches(b *testing.B) {
	var r map[string]any
	if err := json.Unmarshal([]byte(cluster), &r); err != nil {
		b.Fatal(err)
	}
	f, err := Compile("(status=RUNNING OR status=RECONCILING) resourceLabels.env:(prod staging) -nodePools.config.machineType=a2-* currentMasterVersion ~ ^1\\.3")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		f.Matches(r)
	}
}
