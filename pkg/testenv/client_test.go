package testenv_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TypedClient knows the built-in types and, only when asked, another group's: a typed
// CustomResourceDefinition reads back with apiextensions/v1 added and is refused without it.
func TestTypedClientRegistersTheGivenTypes(t *testing.T) {
	ctx := context.Background()
	kube := testenv.SharedKube(t)
	kube.InstallCRDs(t, testenv.OCMCRDs()...)
	name := types.NamespacedName{Name: testenv.OCMCRDs()[0].Name}

	var ns corev1.Namespace
	if err := kube.TypedClient(t).Get(ctx, types.NamespacedName{Name: "default"}, &ns); err != nil {
		t.Fatalf("get the default Namespace with the built-in types: %v", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := kube.TypedClient(t, apiextensionsv1.AddToScheme).Get(ctx, name, &crd); err != nil || crd.Spec.Group == "" {
		t.Fatalf("get CRD %s with apiextensions/v1 registered: %v (%+v)", name.Name, err, crd.Spec)
	}
	if err := kube.TypedClient(t).Get(ctx, name, &apiextensionsv1.CustomResourceDefinition{}); err == nil {
		t.Error("a client without apiextensions/v1 read a typed CustomResourceDefinition")
	}
}
