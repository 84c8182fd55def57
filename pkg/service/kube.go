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

// serverPacedKube removes client-go's client-side rate limit from cfg, bounds the service's writes
// in flight by a window that adapts to the API server's 429s (writeWindow), and counts the 429s
// in the registry's enforcement_<service>_kube_throttled_total.
//
// client-go's default token bucket (5 requests per second, burst 10) caps a service at a rate
// chosen without knowing the server, and a higher fixed cap only moves the problem: too low, a
// burst of a thousand clusters waits on the client while the server idles; too high, it protects
// nothing. The API server paces its clients itself: API Priority and Fairness (on by default since
// Kubernetes 1.29) gives every flow its share, queues what exceeds it and answers 429 with a
// Retry-After when the queue is full, and client-go waits that long and sends the request again
// (up to 10 times; a write whose retries run out fails like any other and the service's own retry
// takes over, so nothing is lost). The write window listens to those 429s: it widens while the
// server serves everything and halves when it sheds load, so a service keeps as many writes in
// flight as the server accepts rather than a number fixed in advance. Each service's own
// concurrency (argo-syncer's SYNC_CONCURRENCY, the dispatcher's delivery workers) still bounds the
// work it has to offer. A service may also set QPS and Burst on Service.Kube before it builds its
// clients (argo-syncer's KUBE_QPS), for an API server that runs without API Priority and Fairness.
func serverPacedKube(cfg *rest.Config, reg prometheus.Registerer, service string) error {
	cfg.QPS = -1 // any negative value: no client-side limiter (0 would mean client-go's default)
	prefix := "enforcement_" + strings.ReplaceAll(service, "-", "_") + "_kube_"
	throttled := prometheus.NewCounter(prometheus.CounterOpts{
		Name: prefix + "throttled_total",
		Help: "Requests the Kubernetes API server answered with 429 Too Many Requests (API Priority and Fairness shedding load); client-go waits their Retry-After and retries.",
	})
	limit := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: prefix + "write_window",
		Help: "Kubernetes writes the service allows in flight now: widened while the API server serves them all, halved by a 429.",
	})
	inFlight := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: prefix + "writes_in_flight",
		Help: "Kubernetes writes sent and not answered yet.",
	})
	for _, c := range []prometheus.Collector{throttled, limit, inFlight} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register the Kubernetes client metrics: %w", err)
		}
	}
	window := newWriteWindow(limit, inFlight)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return pacedTransport{next: rt, window: window, throttled: throttled}
	})
	return nil
}

// pacedTransport passes writes on through the service's write window and counts the 429 answers.
type pacedTransport struct {
	next      http.RoundTripper
	window    *writeWindow
	throttled prometheus.Counter
}

func (t pacedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !inWindow(r) {
		resp, err := t.next.RoundTrip(r)
		t.count(answerOf(resp, err))
		return resp, err
	}
	ticket, err := t.window.acquire(r.Context())
	if err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(r)
	answer := answerOf(resp, err)
	t.count(answer)
	t.window.release(ticket, answer)
	return resp, err
}

func (t pacedTransport) count(answer writeAnswer) {
	if answer == writeThrottled {
		t.throttled.Inc()
	}
}
