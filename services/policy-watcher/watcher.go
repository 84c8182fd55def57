package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/tools/cache"
)

// The watcher is one loop: fold the Policies, read the claim, decide, and make the claim take
// the decided value (through a claimSink: directly, or as an event for the claim writer). It
// evaluates again when a watched Policy or the claim changes, when "compliant" becomes due,
// every poll interval (the resync, and the only trigger without a watch), and after a failure,
// with a backoff capped at the poll interval. Nothing it meets at run time stops it: API errors
// are logged, counted and retried.

// claimSink makes the ClusterClaim take a decision. It returns the claim as it now is (or as
// it was, when nothing was written).
type claimSink interface {
	apply(ctx context.Context, d decision, obs observation, claim claimState) (claimState, error)
}

// watcher folds Policies into the ClusterClaim.
type watcher struct {
	cfg     config
	dyn     dynamic.Interface
	authz   authorizationclient.SelfSubjectAccessReviewInterface
	claims  *claimStore
	sink    claimSink
	metrics *metrics
	logger  *slog.Logger
	now     func() time.Time

	kick chan struct{}

	mu     sync.Mutex
	lister cache.GenericNamespaceLister // the Policy informer's cache; nil while polling

	// Owned by the loop goroutine.
	since    time.Time // start of the compliant streak; zero when the last fold was not compliant
	restored bool      // the clock was read back from the claim once
	lastSeen string    // the last observed value, to log changes only
}

// newWatcher returns a watcher that polls until startWatches finds it may watch; run starts it.
func newWatcher(cfg config, dyn dynamic.Interface, authz authorizationclient.SelfSubjectAccessReviewInterface,
	claims *claimStore, sink claimSink, m *metrics, logger *slog.Logger) *watcher {
	return &watcher{
		cfg: cfg, dyn: dyn, authz: authz, claims: claims, sink: sink, metrics: m, logger: logger,
		now: time.Now, kick: make(chan struct{}, 1),
	}
}

// run evaluates until ctx ends, then stops the informers and returns.
func (w *watcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.startWatches(ctx) }()
	defer wg.Wait()

	ticker := time.NewTicker(w.cfg.PollInterval)
	defer ticker.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	failures := 0
	for {
		d, err := w.evaluate(ctx)
		if ctx.Err() != nil {
			return
		}
		timer.Stop()
		switch {
		case err != nil:
			failures++
			wait := retryDelay(failures, w.cfg.PollInterval)
			if isNotCreatable(err) {
				w.logger.Error("ClusterClaim is missing and may not be created; create it, or grant create on clusterclaims",
					"retryIn", wait.String(), "error", err.Error())
			} else {
				w.logger.Warn("Evaluation failed; retrying", "retryIn", wait.String(), "attempt", failures, "error", err.Error())
			}
			timer.Reset(wait)
		case d.Pending:
			failures = 0
			timer.Reset(max(d.Due.Sub(w.now()), 0))
		default:
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-timer.C:
		case <-w.kick:
		}
	}
}

// retryDelay is 250 ms doubling with each consecutive failure, capped at the poll interval.
func retryDelay(failures int, limit time.Duration) time.Duration {
	d := 250 * time.Millisecond
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// trigger asks the loop for an evaluation; triggers that arrive while one is queued are merged.
func (w *watcher) trigger() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// evaluate runs one fold → decide → apply round. Each failure is counted (api_errors_total by
// operation, evaluations_total{result="error"}) and returned for the loop to log and retry.
func (w *watcher) evaluate(ctx context.Context) (decision, error) {
	policies, err := w.listPolicies(ctx)
	if err != nil {
		w.metrics.apiErrors.WithLabelValues("list_policies").Inc()
		w.metrics.evaluations.WithLabelValues("error").Inc()
		return decision{}, err
	}
	obs := fold(policies)
	claim, err := w.claims.get(ctx)
	if err != nil {
		w.metrics.apiErrors.WithLabelValues("get_claim").Inc()
		w.metrics.evaluations.WithLabelValues("error").Inc()
		return decision{}, err
	}
	w.metrics.setClaim(claim)
	w.metrics.policies.Set(float64(obs.Policies))
	if !w.restored {
		w.restored = true
		if !claim.Since.IsZero() {
			w.since = claim.Since
			w.logger.Info("Restored debounce clock from the ClusterClaim", "claim", w.cfg.ClaimName,
				"compliantSince", formatSince(claim.Since))
		}
	}
	d := decide(obs.Value, w.since, claim, w.now(), w.cfg.StableDuration)
	w.since = d.Since
	if obs.Value != w.lastSeen {
		w.lastSeen = obs.Value
		attrs := []any{"namespace", w.cfg.Namespace, "value", obs.Value, "policies", obs.Policies}
		if len(obs.NonCompliant) > 0 {
			attrs = append(attrs, "nonCompliant", obs.NonCompliant)
		}
		if d.Pending {
			attrs = append(attrs, "writeAt", d.Due.UTC().Format(time.RFC3339Nano))
		}
		w.logger.Info("Observed Policy compliance", attrs...)
	}
	claim, err = w.sink.apply(ctx, d, obs, claim)
	if err != nil {
		w.metrics.evaluations.WithLabelValues("error").Inc()
		return d, err
	}
	w.metrics.setClaim(claim)
	w.metrics.evaluations.WithLabelValues(obs.Value).Inc()
	return d, nil
}

// listPolicies reads the namespace's Policies from the informer's cache when watching, else
// from the API server.
func (w *watcher) listPolicies(ctx context.Context) ([]*unstructured.Unstructured, error) {
	w.mu.Lock()
	lister := w.lister
	w.mu.Unlock()
	if lister != nil {
		objs, err := lister.List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("list cached %s: %w", policiesResource, err)
		}
		out := make([]*unstructured.Unstructured, 0, len(objs))
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok {
				out = append(out, u)
			}
		}
		return out, nil
	}
	list, err := w.dyn.Resource(policiesGVR).Namespace(w.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list %s in %s: %w", policiesResource, w.cfg.Namespace, err)
	}
	out := make([]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// startWatches upgrades the watcher from polling to watching, for the Policies and for the
// claim separately, where RBAC allows list and watch. The original's ClusterRole grants neither
// watch on Policies nor list on ClusterClaims: then the watcher keeps polling, which is the
// original's behaviour. Access reviews that fail (API down) are retried; it returns once both
// questions are answered, or when ctx ends, after stopping the informers it started.
func (w *watcher) startWatches(ctx context.Context) {
	type target struct {
		what  string
		gvr   schema.GroupVersionResource
		ns    string
		tweak dynamicinformer.TweakListOptionsFunc
		usage func(informers.GenericInformer)
		done  bool
	}
	targets := []*target{
		{what: "Policies", gvr: policiesGVR, ns: w.cfg.Namespace, usage: func(inf informers.GenericInformer) {
			w.mu.Lock()
			w.lister = inf.Lister().ByNamespace(w.cfg.Namespace)
			w.mu.Unlock()
		}},
		{what: "ClusterClaim", gvr: claimsGVR, tweak: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.cfg.ClaimName).String()
		}},
	}
	var factories []dynamicinformer.DynamicSharedInformerFactory
	defer func() {
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	for failures := 0; ; {
		pending := false
		for _, t := range targets {
			if t.done {
				continue
			}
			ok, err := w.canListAndWatch(ctx, t.gvr, t.ns)
			if err != nil {
				w.metrics.apiErrors.WithLabelValues("access_review").Inc()
				pending = true
				continue
			}
			t.done = true
			if !ok {
				w.logger.Warn("Watching "+t.what+" is not allowed (RBAC grants no list and watch); polling instead",
					"interval", w.cfg.PollInterval.String())
				continue
			}
			f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(w.dyn, 0, t.ns, t.tweak)
			inf := f.ForResource(t.gvr)
			if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(any) { w.trigger() },
				UpdateFunc: func(any, any) { w.trigger() },
				DeleteFunc: func(any) { w.trigger() },
			}); err != nil {
				w.logger.Error("Cannot watch "+t.what+"; polling instead", "error", err.Error())
				continue
			}
			factories = append(factories, f)
			f.Start(ctx.Done())
			if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
				return
			}
			if t.usage != nil {
				t.usage(inf)
			}
			w.logger.Info("Watching "+t.what, "resync", w.cfg.PollInterval.String())
			w.trigger()
		}
		if !pending {
			<-ctx.Done()
			return
		}
		failures++
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryDelay(failures, w.cfg.PollInterval)):
		}
	}
}

// canListAndWatch asks the API server whether this identity may list and watch a resource.
func (w *watcher) canListAndWatch(ctx context.Context, gvr schema.GroupVersionResource, ns string) (bool, error) {
	for _, verb := range []string{"list", "watch"} {
		review, err := w.authz.Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("access review %s %s: %w", verb, gvr.Resource, err)
		}
		if !review.Status.Allowed {
			return false, nil
		}
	}
	return true, nil
}

// errorOperation names the failed operation of a sink error for the api_errors metric.
func errorOperation(err error) string {
	if errors.Is(err, errClaimNotCreatable) {
		return "create_claim"
	}
	return "write_claim"
}
