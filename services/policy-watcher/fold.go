package main

import (
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// policyCompliant is the one status.compliant value OCM uses for a compliant Policy. The CRD
// also allows "NonCompliant" and "Pending", and a Policy the framework has not evaluated yet has
// no status at all.
const policyCompliant = "Compliant"

// maxListedPolicies bounds the names a compliance changed event carries, so that a namespace
// with thousands of failing policies cannot produce an oversized message.
const maxListedPolicies = 50

// observation is the fold of every Policy of the namespace at one moment.
type observation struct {
	// Value is events.Compliant, events.NonCompliant or events.Empty.
	Value string
	// Policies is how many Policies were folded.
	Policies int
	// NonCompliant names the Policies that are not exactly Compliant, sorted, at most
	// maxListedPolicies of them.
	NonCompliant []string
}

// fold reduces the Policies of a namespace to one value, as the original did: no Policy is
// "empty"; any Policy whose status.compliant is not exactly "Compliant" (NonCompliant, Pending,
// missing, or anything else) makes it "noncompliant"; otherwise it is "compliant".
func fold(policies []*unstructured.Unstructured) observation {
	obs := observation{Policies: len(policies)}
	if len(policies) == 0 {
		obs.Value = events.Empty
		return obs
	}
	var failing []string
	for _, p := range policies {
		state, _, _ := unstructured.NestedString(p.Object, "status", "compliant")
		if state != policyCompliant {
			failing = append(failing, p.GetName())
		}
	}
	if len(failing) == 0 {
		obs.Value = events.Compliant
		return obs
	}
	sort.Strings(failing)
	obs.Value = events.NonCompliant
	obs.NonCompliant = failing[:min(len(failing), maxListedPolicies)]
	return obs
}
