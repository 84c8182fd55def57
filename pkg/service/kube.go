package service

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeConfig returns the Kubernetes client configuration: the file named by KUBECONFIG when set,
// otherwise the in-cluster service account. The error says which one failed.
func KubeConfig(getenv Getenv) (*rest.Config, error) {
	if path := getenv("KUBECONFIG"); path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("KUBECONFIG=%s: %w", path, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no KUBECONFIG and not in a cluster: %w", err)
	}
	return cfg, nil
}

// KubeReachable is a readiness check: the API server answers its /readyz.
func KubeReachable(cfg *rest.Config) (Check, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("reach the Kubernetes API: %w", err)
		}
		return nil
	}, nil
}
