package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestPreviewAppliesDefaults previews the installed rule's own manifest, which leaves out every
// defaulted field (deletionPolicy, the enforcements' namespace): with the CRD's defaults filled
// in it is the live spec, the same generation, not an edit. Without them the preview compared a
// spec with empty fields to the API server's defaulted one and announced generation n+1.
func TestPreviewAppliesDefaults(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.publish(appeared(testCluster("prod-a", map[string]string{"env": "prod"}, true), 1))
	var cr v1beta1.ClusterRule
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(fleetRule, "NS", e.ns)), &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Spec.DeletionPolicy != "" || cr.Spec.Enforcements[0].Namespace != "" {
		t.Fatalf("the manifest should leave the defaulted fields out: %+v", cr.Spec)
	}
	if err := e.c.Create(context.Background(), &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Spec.DeletionPolicy != "Orphan" || cr.Spec.Enforcements[0].Namespace != "default" {
		t.Fatalf("the API server did not default the rule: %+v", cr.Spec)
	}
	e.waitIntentSet("install prod-a guestbook", "install prod-a agent")

	res, msg := e.previewOf(fleetRule)
	if msg != "" {
		t.Fatal(msg)
	}
	if !res.Existing || res.Rule.Generation != res.LiveGeneration || res.LiveGeneration != 1 {
		t.Errorf("the installed rule's manifest previews as generation %d of live generation %d (existing %v), want the same generation",
			res.Rule.Generation, res.LiveGeneration, res.Existing)
	}
	// Spelling a default out is the same spec too; changing it is an edit.
	res, msg = e.previewOf(strings.Replace(fleetRule, "spec:\n", "spec:\n  deletionPolicy: Orphan\n", 1))
	if msg != "" || res.Rule.Generation != 1 {
		t.Errorf("deletionPolicy: Orphan spelt out: %s generation %d", msg, res.Rule.Generation)
	}
	res, msg = e.previewOf(strings.Replace(fleetRule, "spec:\n", "spec:\n  deletionPolicy: Cascade\n", 1))
	if msg != "" || res.Rule.Generation != 2 {
		t.Errorf("deletionPolicy: Cascade: %s generation %d", msg, res.Rule.Generation)
	}
}

// celNotRun ends the API server's message when a schema error kept it from running the CRD's
// CEL rule.
const celNotRun = `, <nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`

// TestPreviewSchemaErrors: a manifest the CRD's schema refuses gets the API server's message,
// with code 400.
func TestPreviewSchemaErrors(t *testing.T) {
	e := newEnv(t)
	e.start()
	for _, tt := range []struct{ manifest, want string }{
		{strings.Replace(fleetRule, "spec:\n", "spec:\n  deletionPolicy: Sometimes\n", 1),
			`400: ClusterRule.enforcement.globo.com "fleet" is invalid: [spec.deletionPolicy: Unsupported value: "Sometimes": supported values: "Orphan", "Cascade"` + celNotRun},
		{strings.Replace(fleetRule, "    repo: https://git.example/agent\n", "", 1),
			`400: ClusterRule.enforcement.globo.com "fleet" is invalid: [spec.enforcements[1].repo: Required value` + celNotRun},
		{strings.Replace(fleetRule, "    rancher:\n", "    static: {}\n    rancher:\n", 1),
			`400: ClusterRule.enforcement.globo.com "fleet" is invalid: spec.source: Invalid value: "object": exactly one source kind (rancher, static, eks, gke, ocm, aks or clusterProfile) must be set`},
		{strings.Replace(fleetRule, "path: guestbook", "paht: guestbook", 1),
			`400: ClusterRule in version "v1beta1" cannot be handled as a ClusterRule: strict decoding error: unknown field "spec.enforcements[0].paht"`},
	} {
		if res, msg := e.previewOf(tt.manifest); msg != tt.want {
			t.Errorf("preview:\n got %q (%+v)\nwant %q", msg, res, tt.want)
		}
	}
}

// agreementCases are manifests the preview and the API server must judge alike: valid ones
// that lean on the CRD's defaults, and ones each schema rule refuses.
var agreementCases = []struct{ name, manifest string }{
	{"defaults", fleetRule},
	{"everything set", strings.Replace(fleetRule, "spec:\n", `spec:
  deletionPolicy: Cascade
  triggers:
    beforeInstall: {endpoint: "https://hooks.example/before"}
    afterInstall: {endpoint: "https://hooks.example/after", failurePolicy: Fail, timeout: 30, signingSecret: hook}
`, 1) + "    namespace: agent\n    targetRevision: v2\n    labels: {team: a}\n"},
	{"status dropped", fleetRule + "status:\n  matchedClusters: 3\n"},
	{"static source with expressions", strings.Replace(fleetRule, "    rancher:\n      labels: {env: prod}\n",
		"    static: {configMap: clusters}\n    matchExpressions: [{key: env, operator: In, values: [prod]}]\n", 1)},
	{"enum", strings.Replace(fleetRule, "spec:\n", "spec:\n  deletionPolicy: Sometimes\n", 1)},
	{"required", strings.Replace(fleetRule, "    repo: https://git.example/agent\n", "", 1)},
	{"no enforcements", fleetRule[:strings.Index(fleetRule, "  enforcements:")]},
	{"empty enforcements", fleetRule[:strings.Index(fleetRule, "  enforcements:")] + "  enforcements: []\n"},
	{"empty name", strings.Replace(fleetRule, "name: guestbook", `name: ""`, 1)},
	{"trigger bounds and enum", strings.Replace(fleetRule, "spec:\n", `spec:
  triggers:
    beforeInstall: {endpoint: "https://hooks.example/before", timeout: 0, failurePolicy: Maybe}
    afterInstall: {endpoint: "", timeout: 301}
`, 1)},
	{"wrong type", strings.Replace(fleetRule, "spec:\n", "spec:\n  triggers:\n    afterInstall: {endpoint: x, timeout: \"5\"}\n", 1)},
	{"two sources (CEL)", strings.Replace(fleetRule, "    rancher:\n", "    static: {}\n    rancher:\n", 1)},
	{"no source kind (CEL)", strings.Replace(fleetRule, "    rancher:\n      labels: {env: prod}\n", "    matchLabels: {env: prod}\n", 1)},
	{"CEL not run after a blocking error", strings.Replace(strings.Replace(fleetRule, "    rancher:\n", "    static: {}\n    rancher:\n", 1),
		"spec:\n", "spec:\n  deletionPolicy: Sometimes\n", 1)},
	{"unknown spec field", strings.Replace(fleetRule, "path: guestbook", "paht: guestbook", 1)},
	{"unknown metadata field", strings.Replace(fleetRule, "  name: fleet\n", "  name: fleet\n  colour: blue\n", 1)},
	{"invalid name", strings.Replace(fleetRule, "name: fleet", "name: Fleet_1", 1)},
	{"invalid label", strings.Replace(fleetRule, "  name: fleet\n", "  name: fleet\n  labels: {\"a b\": c}\n", 1)},
}

// TestPreviewAgreesWithDryRun is the check that the preview treats a manifest as the API server
// does: for each manifest, the preview's verdict is that of a server-side dry-run create with
// strict field validation (kubectl's default) on the real kube-apiserver, its error is the API
// server's message, word for word, and the rule it previews, defaults filled in, is the one the
// dry-run returns.
func TestPreviewAgreesWithDryRun(t *testing.T) {
	e := newEnv(t)
	e.start()
	rs, err := clusterRuleSchema()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range agreementCases {
		manifest := strings.ReplaceAll(tt.manifest, "NS", e.ns)
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		serverErr := e.c.Create(ctx, &u, client.DryRunAll, client.FieldValidation("Strict"))
		_, msg := e.previewOf(tt.manifest)
		cr, err := parseRule(ctx, rs, []byte(manifest))
		switch {
		case serverErr != nil && msg == "":
			t.Errorf("%s: the API server refuses it (%v), the preview does not", tt.name, serverErr)
		case serverErr == nil && msg != "":
			t.Errorf("%s: the API server accepts it, the preview answers %s", tt.name, msg)
		case serverErr != nil:
			if err == nil || msg != "400: "+err.Error() {
				t.Fatalf("%s: the preview answers %s, its parse %v", tt.name, msg, err)
			}
			if !sameErrors(err, serverErr) {
				t.Errorf("%s:\n preview %s\n  server %s", tt.name, msg, serverErr)
			}
		default:
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			var dryRun v1beta1.ClusterRule
			if err := runtimeFromUnstructured(&u, &dryRun); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(cr.Spec, dryRun.Spec) || !apiequality.Semantic.DeepEqual(cr.Status, dryRun.Status) ||
				cr.Name != dryRun.Name || cr.Namespace != dryRun.Namespace || !apiequality.Semantic.DeepEqual(cr.Labels, dryRun.Labels) {
				a, _ := yaml.Marshal(cr)
				b, _ := yaml.Marshal(&dryRun)
				t.Errorf("%s: the preview's rule\n%s\ndiffers from the dry-run's\n%s", tt.name, a, b)
			}
		}
		t.Logf("%s: %v", tt.name, serverErr)
	}
}

// sameErrors tells whether the preview's error is the API server's: the same message, or, for an
// invalid object, the same message with the same field errors in any order (the API server lists
// the schema's errors in the order it walks the object's maps, which varies).
func sameErrors(preview, server error) bool {
	var ps, ss *apierrors.StatusError
	if !errors.As(preview, &ps) || !errors.As(server, &ss) || !apierrors.IsInvalid(server) {
		return strings.TrimPrefix(preview.Error(), "400: ") == server.Error()
	}
	causes := func(se *apierrors.StatusError) []string {
		var out []string
		for _, c := range se.ErrStatus.Details.Causes {
			out = append(out, fmt.Sprintf("%s %s: %s", c.Type, c.Field, c.Message))
		}
		slices.Sort(out)
		return out
	}
	return ps.ErrStatus.Message == server.Error() ||
		(ps.ErrStatus.Reason == ss.ErrStatus.Reason && slices.Equal(causes(ps), causes(ss)) && len(causes(ss)) > 0)
}

// runtimeFromUnstructured decodes an unstructured object into a typed one, through JSON as the
// controller's client does.
func runtimeFromUnstructured(u *unstructured.Unstructured, into *v1beta1.ClusterRule) error {
	data, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(data, into)
}
