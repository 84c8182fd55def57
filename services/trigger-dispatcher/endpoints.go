package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// clusterRules is the ClusterRule resource (pkg/api v1beta1), read to find a webhook endpoint
// whose credentials the events do not carry.
var clusterRules = schema.GroupVersionResource{Group: "enforcement.globo.com", Version: "v1beta1", Resource: "clusterrules"}

// ruleGetter reads one ClusterRule; dynamic.NamespaceableResourceInterface is one.
type ruleGetter interface {
	Namespace(string) dynamic.ResourceInterface
}

// endpointError says why a redacted endpoint could not be resolved from its rule; the delivery
// fails with it, without an attempt.
type endpointError struct{ msg string }

func (e *endpointError) Error() string { return e.msg }

// fullEndpoint is the URL a delivery of r calls. Intents carry endpoints redacted
// (events.RedactURL): when the rule's endpoint has credentials (Trigger.EndpointRedacted), the
// full endpoint is read from the rule now, and used only if it still redacts to the recorded one
// (a rotated token is used; another host or path is not: the rule changed, and the delivery
// fails). The full endpoint never leaves this delivery: it is not recorded, published or logged.
// A missing rule or endpoint is an *endpointError; an unreachable API server another error.
func (d *dispatcher) fullEndpoint(ctx context.Context, r *record) (string, error) {
	if !r.Trigger.EndpointRedacted {
		return r.Trigger.Endpoint, nil
	}
	if d.rules == nil {
		return "", &endpointError{"the endpoint has credentials and no ClusterRule client is configured"}
	}
	u, err := d.rules.Namespace(r.Rule.Namespace).Get(ctx, r.Rule.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", &endpointError{fmt.Sprintf("rule %s not found: its %s endpoint has credentials, which are read from the rule", r.Rule, r.Phase)}
	}
	if err != nil {
		return "", fmt.Errorf("read rule %s for its %s endpoint: %w", r.Rule, r.Phase, err)
	}
	endpoint, _, _ := unstructured.NestedString(u.Object, "spec", "triggers", r.Phase, "endpoint")
	if endpoint == "" || events.RedactURL(endpoint) != r.Trigger.Endpoint {
		return "", &endpointError{fmt.Sprintf("rule %s no longer has the %s endpoint %s", r.Rule, r.Phase, r.Trigger.Endpoint)}
	}
	return endpoint, nil
}
