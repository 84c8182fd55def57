package testenv

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TypedClient returns a controller-runtime client for the API server whose scheme holds the
// client-go built-in types and those each addToScheme registers (the project's own API group,
// for example), so that a test reads and writes them as typed objects. Any error fails t.
func (k *Kube) TypedClient(t testing.TB, addToScheme ...func(*runtime.Scheme) error) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, addToScheme...) {
		if err := add(scheme); err != nil {
			t.Fatalf("build the client's scheme: %v", err)
		}
	}
	c, err := client.New(k.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client for %s: %v", k.Config.Host, err)
	}
	return c
}
