package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// The two OCM resources the service reads and writes. They are used through the dynamic client:
// pulling the OCM Go modules in for two fields would cost more than it saves.
var (
	policiesGVR = schema.GroupVersionResource{Group: "policy.open-cluster-management.io", Version: "v1", Resource: "policies"}
	claimsGVR   = schema.GroupVersionResource{Group: "cluster.open-cluster-management.io", Version: "v1alpha1", Resource: "clusterclaims"}
)

// Labels and annotations the service puts on the ClusterClaim.
const (
	labelManagedBy   = "app.kubernetes.io/managed-by"
	managedByValue   = "enforcement"
	annotationEvent  = "policy-watcher.enforcement.globo.com/applied-event"
	claimKind        = "ClusterClaim"
	claimAPIVersion  = "cluster.open-cluster-management.io/v1alpha1"
	policiesResource = "policies.policy.open-cluster-management.io"
)

// errClaimNotCreatable means the ClusterClaim is missing and the service may not create it (the
// original's RBAC grants get, patch and update only). It is reported, and retried every poll, in
// case someone creates the claim or grants create.
var errClaimNotCreatable = errors.New("the ClusterClaim does not exist and creating it is forbidden")

// claimStore reads and writes the one ClusterClaim. Writes are JSON merge patches of only the
// fields the caller changes, so that the watcher (the clock annotation) and the claim writer
// (spec.value) never overwrite each other, and labels or annotations set by others survive.
type claimStore struct {
	client dynamic.ResourceInterface
	name   string
}

// newClaimStore returns the store of the cluster-scoped ClusterClaim name.
func newClaimStore(dyn dynamic.Interface, name string) *claimStore {
	return &claimStore{client: dyn.Resource(claimsGVR), name: name}
}

// get reads the claim. A missing claim is not an error: it comes back with Exists false.
func (s *claimStore) get(ctx context.Context) (claimState, error) {
	obj, err := s.client.Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return claimState{}, nil
	}
	if err != nil {
		return claimState{}, fmt.Errorf("get ClusterClaim %s: %w", s.name, err)
	}
	return claimStateOf(obj), nil
}

// claimStateOf extracts what the service needs from a ClusterClaim object.
func claimStateOf(obj *unstructured.Unstructured) claimState {
	value, _, _ := unstructured.NestedString(obj.Object, "spec", "value")
	c := claimState{Exists: true, Value: value, ResourceVersion: obj.GetResourceVersion()}
	ann := obj.GetAnnotations()
	if raw, ok := ann[annotationCompliantSince]; ok {
		c.HasSince = true
		if t, err := time.Parse(time.RFC3339Nano, raw); err == nil {
			c.Since = t
		}
	}
	c.AppliedEvent = ann[annotationEvent]
	return c
}

// claimChange is one write: a new spec.value and annotations to set ("" value: leave it; a nil
// annotation value: delete the annotation).
type claimChange struct {
	Value       string
	Annotations map[string]*string
}

// apply writes the change with a merge patch and returns the claim as written. When the claim
// is missing it creates it, labelled as Enforcement's, if the change carries a value; a change
// without a value (the clock alone) is not worth creating the claim for, and returns Exists false.
func (s *claimStore) apply(ctx context.Context, ch claimChange) (claimState, error) {
	patch := map[string]any{}
	if len(ch.Annotations) > 0 {
		ann := map[string]any{}
		for k, v := range ch.Annotations {
			if v == nil {
				ann[k] = nil
			} else {
				ann[k] = *v
			}
		}
		patch["metadata"] = map[string]any{"annotations": ann}
	}
	if ch.Value != "" {
		patch["spec"] = map[string]any{"value": ch.Value}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return claimState{}, err
	}
	c, err := s.patch(ctx, body)
	if !apierrors.IsNotFound(err) {
		return c, err
	}
	if ch.Value == "" {
		return claimState{}, nil
	}
	return s.create(ctx, ch, body)
}

// patch sends a merge patch; a 404 comes back as an error for apierrors.IsNotFound.
func (s *claimStore) patch(ctx context.Context, body []byte) (claimState, error) {
	obj, err := s.client.Patch(ctx, s.name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return claimState{}, fmt.Errorf("patch ClusterClaim %s: %w", s.name, err)
	}
	return claimStateOf(obj), nil
}

// create creates the claim with the change applied. Another writer creating it first is not an
// error: the change is then applied as the patch body.
func (s *claimStore) create(ctx context.Context, ch claimChange, body []byte) (claimState, error) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": claimAPIVersion,
		"kind":       claimKind,
		"metadata":   map[string]any{"name": s.name},
		"spec":       map[string]any{"value": ch.Value},
	}}
	obj.SetLabels(map[string]string{labelManagedBy: managedByValue})
	ann := map[string]string{}
	for k, v := range ch.Annotations {
		if v != nil {
			ann[k] = *v
		}
	}
	if len(ann) > 0 {
		obj.SetAnnotations(ann)
	}
	created, err := s.client.Create(ctx, obj, metav1.CreateOptions{})
	switch {
	case err == nil:
		return claimStateOf(created), nil
	case apierrors.IsAlreadyExists(err):
		return s.patch(ctx, body)
	case apierrors.IsForbidden(err):
		return claimState{}, fmt.Errorf("create ClusterClaim %s: %w: %w", s.name, errClaimNotCreatable, err)
	default:
		return claimState{}, fmt.Errorf("create ClusterClaim %s: %w", s.name, err)
	}
}

// ptr returns a pointer to s, for claimChange annotations.
func ptr(s string) *string { return &s }

// formatSince renders the clock for annotationCompliantSince.
func formatSince(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
