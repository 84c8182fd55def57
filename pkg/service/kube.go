package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
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

// serverPacedKube removes client-go's client-side rate limit from cfg and counts the API server's
// 429 answers in the registry's enforcement_<service>_kube_throttled_total.
//
// client-go's default token bucket (5 requests per second, burst 10) caps a service at a rate
// chosen without knowing the server, and a higher fixed cap only moves the problem: too low, a
// burst of a thousand clusters waits on the client while the server idles; too high, it protects
// nothing. The API server paces its clients itself: API Priority and Fairness (on by default since
// Kubernetes 1.29) gives every flow its share, queues what exceeds it and answers 429 with a
// Retry-After when the queue is full, and client-go waits that long and sends the request again
// (up to 10 times; a write whose retries run out fails like any other and the service's own retry
// takes over, so nothing is lost). The requests in flight stay bounded by each service's own
// concurrency (argo-syncer's SYNC_CONCURRENCY, the dispatcher's delivery workers). A service may
// still set QPS and Burst on Service.Kube before it builds its clients (argo-syncer's KUBE_QPS),
// for an API server that runs without API Priority and Fairness.
func serverPacedKube(cfg *rest.Config, reg prometheus.Registerer, service string) error {
	cfg.QPS = -1 // any negative value: no client-side limiter (0 would mean client-go's default)
	throttled := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "enforcement_" + strings.ReplaceAll(service, "-", "_") + "_kube_throttled_total",
		Help: "Requests the Kubernetes API server answered with 429 Too Many Requests (API Priority and Fairness shedding load); client-go waits their Retry-After and retries.",
	})
	if err := reg.Register(throttled); err != nil {
		return fmt.Errorf("register the throttling metric: %w", err)
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return throttleCounter{next: rt, throttled: throttled}
	})
	return nil
}

// throttleCounter counts the 429 answers of the round trips it passes on.
type throttleCounter struct {
	next      http.RoundTripper
	throttled prometheus.Counter
}

func (t throttleCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		t.throttled.Inc()
	}
	return resp, err
}
