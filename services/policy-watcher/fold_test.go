package main

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// policy builds a Policy object as the dynamic client returns it; state "" means no status.
func policy(name, state string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.open-cluster-management.io/v1",
		"kind":       "Policy",
		"metadata":   map[string]any{"name": name, "namespace": "cluster1"},
		"spec":       map[string]any{"disabled": false, "policy-templates": []any{}},
	}}
	if state != "" {
		u.Object["status"] = map[string]any{"compliant": state}
	}
	return u
}

func TestFold(t *testing.T) {
	withStatus := func(status any) *unstructured.Unstructured {
		p := policy("odd", "")
		p.Object["status"] = status
		return p
	}
	tests := []struct {
		name         string
		policies     []*unstructured.Unstructured
		want         string
		nonCompliant []string
	}{
		{"no policies", nil, events.Empty, nil},
		{"one compliant", []*unstructured.Unstructured{policy("a", "Compliant")}, events.Compliant, nil},
		{"all compliant", []*unstructured.Unstructured{policy("a", "Compliant"), policy("b", "Compliant")}, events.Compliant, nil},
		{"one noncompliant", []*unstructured.Unstructured{policy("a", "Compliant"), policy("b", "NonCompliant")}, events.NonCompliant, []string{"b"}},
		{"pending", []*unstructured.Unstructured{policy("a", "Pending")}, events.NonCompliant, []string{"a"}},
		{"status missing", []*unstructured.Unstructured{policy("a", "Compliant"), policy("b", "")}, events.NonCompliant, []string{"b"}},
		{"lower case is not exact", []*unstructured.Unstructured{policy("a", "compliant")}, events.NonCompliant, []string{"a"}},
		{"compliant field not a string", []*unstructured.Unstructured{withStatus(map[string]any{"compliant": true})}, events.NonCompliant, []string{"odd"}},
		{"status without compliant", []*unstructured.Unstructured{withStatus(map[string]any{"details": []any{}})}, events.NonCompliant, []string{"odd"}},
		{"names sorted", []*unstructured.Unstructured{policy("z", "NonCompliant"), policy("m", "Compliant"), policy("a", "Pending")}, events.NonCompliant, []string{"a", "z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fold(tt.policies)
			if got.Value != tt.want || got.Policies != len(tt.policies) || !slices.Equal(got.NonCompliant, tt.nonCompliant) {
				t.Fatalf("fold = %+v, want value %s, %d policies, nonCompliant %v", got, tt.want, len(tt.policies), tt.nonCompliant)
			}
		})
	}
}

func TestFoldBoundsNonCompliantNames(t *testing.T) {
	var ps []*unstructured.Unstructured
	for i := range 2 * maxListedPolicies {
		ps = append(ps, policy(fmt.Sprintf("p%03d", i), "NonCompliant"))
	}
	got := fold(ps)
	if len(got.NonCompliant) != maxListedPolicies || got.Policies != 2*maxListedPolicies || got.NonCompliant[0] != "p000" {
		t.Fatalf("fold of %d failing policies: %d names (first %q), %d policies", len(ps), len(got.NonCompliant), got.NonCompliant[0], got.Policies)
	}
}
