package main

// The ClusterRule controller. controller-runtime delivers rule changes (and, through a channel
// source, "this rule's status may have changed" notices from the engine); the work queue folds
// repeated notices for one rule into one reconcile, which is how status writes are coalesced.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Finalizer keeps a deleted ClusterRule until its uninstall intents are published (the original
// operator leaked every Application of a deleted rule).
const Finalizer = "enforcement.globo.com/uninstall"

// reconciler reconciles ClusterRules against the engine.
type reconciler struct {
	client          client.Client
	engine          *engine
	secretNamespace string
	metrics         *metrics
	log             *slog.Logger
	// events writes the rule's Kubernetes Events (kubeevents.go); nil writes none.
	events *ruleEvents
}

// setupController registers the controller with mgr and returns the function the engine calls
// to mark a rule dirty.
func setupController(ctx context.Context, mgr ctrl.Manager, rc *reconciler, statusInterval time.Duration) (func(string), error) {
	n := newNotifier(statusInterval)
	go n.pump(ctx)
	skip := true
	err := ctrl.NewControllerManagedBy(mgr).
		// Only what an author writes starts a reconcile: the spec (its generation, which deletion
		// bumps too), the annotations (a rollout's approval) and the labels. The status this
		// controller writes comes back as an update; reconciling that would write again as soon
		// as the counts moved, at the pace of API round trips instead of STATUS_INTERVAL.
		For(&v1beta1.ClusterRule{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		// A grant's change re-evaluates the rules outside OPERATOR_NAMESPACE (tenancy.go).
		Watches(&v1beta1.ClusterRuleGrant{}, handler.EnqueueRequestsFromMapFunc(rc.tenantRules)).
		WatchesRawSource(source.Channel(n.out, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: &skip}).
		Complete(rc)
	if err != nil {
		return nil, fmt.Errorf("set up ClusterRule controller: %w", err)
	}
	return n.add, nil
}

// Reconcile evaluates the rule (only when its generation changed), handles deletion through the
// finalizer, and writes the status when it differs from what the API server has.
func (rc *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select { // the engine must know its state before it judges a rule
	case <-rc.engine.loaded:
	case <-ctx.Done():
		return ctrl.Result{}, ctx.Err()
	}
	key := req.Namespace + "/" + req.Name
	var cr v1beta1.ClusterRule
	if err := rc.client.Get(ctx, req.NamespacedName, &cr); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer (removed by hand): still uninstall what it had.
			rc.events.forget(key)
			return ctrl.Result{}, rc.engine.deleteRule(ctx, key, events.RuleRef{}, "")
		}
		return ctrl.Result{}, err
	}
	if !cr.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(&cr, Finalizer) {
			return ctrl.Result{}, nil
		}
		policy := cr.Spec.DeletionPolicy
		ref := events.RuleRef{Namespace: cr.Namespace, Name: cr.Name, UID: string(cr.UID), Generation: cr.Generation}
		if err := rc.engine.deleteRule(ctx, key, ref, policy); err != nil {
			return ctrl.Result{}, err
		}
		rc.events.deleting(&cr)
		patch := client.MergeFrom(cr.DeepCopy())
		controllerutil.RemoveFinalizer(&cr, Finalizer)
		if err := rc.client.Patch(ctx, &cr, patch); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("remove finalizer of %s: %w", key, err)
		}
		rc.log.Info("Deleted ClusterRule; uninstall intents published", "rule", key)
		return ctrl.Result{}, nil
	}
	// The finalizer goes on before the first intent, so no rule can vanish with installs it
	// never uninstalled.
	if !controllerutil.ContainsFinalizer(&cr, Finalizer) {
		patch := client.MergeFrom(cr.DeepCopy())
		controllerutil.AddFinalizer(&cr, Finalizer)
		if err := rc.client.Patch(ctx, &cr, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to %s: %w", key, err)
		}
	}
	r, err := compileWithGrants(ctx, rc.client, &cr, rc.secretNamespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := rc.engine.applyRule(ctx, r); err != nil {
		return ctrl.Result{}, err
	}
	bake, err := rc.engine.advanceRollout(ctx, key)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("rollout of %s: %w", key, err)
	}
	// The status is computed from the engine's state, not accumulated in the object, so any
	// number of notices collapse into one write of the current truth.
	status, requeue := rc.engine.status(key, cr.Generation)
	if bake > 0 && (requeue == 0 || bake < requeue) {
		requeue = bake // the step's bake time ends: the rollout moves on
	}
	before := readyConditionOf(&cr)
	conds := append([]metav1.Condition(nil), cr.Status.Conditions...)
	for _, c := range status.Conditions {
		meta.SetStatusCondition(&conds, c) // keeps lastTransitionTime when the status is the same
	}
	status.Conditions = conds
	if !equality.Semantic.DeepEqual(cr.Status, status) {
		patch := client.MergeFrom(cr.DeepCopy())
		cr.Status = status
		if err := rc.client.Status().Patch(ctx, &cr, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("update status of %s: %w", key, err)
		}
		rc.metrics.statusWrites.Inc()
	}
	return ctrl.Result{RequeueAfter: rc.events.reconciled(&cr, before, requeue)}, nil
}

// compileWithGrants compiles a rule (compileRule) with the grants in OPERATOR_NAMESPACE, read
// from c (the manager's cache).
func compileWithGrants(ctx context.Context, c client.Reader, cr *v1beta1.ClusterRule, operatorNamespace string) (*ruleState, error) {
	if cr.Namespace == operatorNamespace {
		return ruleFromSpec(cr, operatorNamespace), nil
	}
	var grants v1beta1.ClusterRuleGrantList
	if err := c.List(ctx, &grants, client.InNamespace(operatorNamespace)); err != nil {
		return nil, fmt.Errorf("list ClusterRuleGrants in %s: %w", operatorNamespace, err)
	}
	return compileRule(cr, operatorNamespace, grants.Items), nil
}

// tenantRules maps a ClusterRuleGrant event to the rules outside OPERATOR_NAMESPACE, which a
// grant may allow or stop allowing (the old spec of a changed or deleted grant is not known
// here, so all of them: grants change rarely, and a rule whose grant did not change is a no-op).
func (rc *reconciler) tenantRules(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.GetNamespace() != rc.secretNamespace {
		return nil // grants count only in OPERATOR_NAMESPACE
	}
	var rules v1beta1.ClusterRuleList
	if err := rc.client.List(ctx, &rules); err != nil {
		rc.log.Warn("Rules not re-evaluated after a ClusterRuleGrant change", "grant", obj.GetName(), "error", err)
		return nil
	}
	var out []reconcile.Request
	for i := range rules.Items {
		if ns := rules.Items[i].Namespace; ns != rc.secretNamespace {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: rules.Items[i].Name}})
		}
	}
	return out
}

// metav1Condition is a Ready condition for generation, to be filled in.
func metav1Condition(generation int64) metav1.Condition {
	return metav1.Condition{Type: v1beta1.ConditionReady, ObservedGeneration: generation, LastTransitionTime: metav1.Now()}
}

// notifier turns engine notices into controller events without ever blocking the engine: keys
// collect in a set and one goroutine feeds them to the controller's channel source. A rule is
// passed on once its notices have paused for interval, or, while they keep coming (a burst of
// clusters, each concerning the rule), once maxWait has passed since the first of them: a burst
// of events on a rule becomes one status write per maxWait instead of one per interval.
type notifier struct {
	mu       sync.Mutex
	pending  map[string]pendingNotice
	wake     chan struct{}
	out      chan event.GenericEvent
	interval time.Duration
	maxWait  time.Duration
	now      func() time.Time
}

// statusMaxWaitFactor sets a notifier's maxWait: STATUS_INTERVAL times this.
const statusMaxWaitFactor = 10

// pendingNotice is when the notices a rule has waiting began, and when the last one came.
type pendingNotice struct{ first, last time.Time }

func newNotifier(interval time.Duration) *notifier {
	return &notifier{pending: map[string]pendingNotice{}, wake: make(chan struct{}, 1), out: make(chan event.GenericEvent),
		interval: interval, maxWait: statusMaxWaitFactor * interval, now: time.Now}
}

func (n *notifier) add(key string) {
	now := n.now()
	n.mu.Lock()
	p, ok := n.pending[key]
	if !ok {
		p.first = now
	}
	p.last = now
	n.pending[key] = p
	n.mu.Unlock()
	if !ok {
		select {
		case n.wake <- struct{}{}:
		default:
		}
	}
}

// due takes the keys whose notices are due at now out of the pending set and returns them, with
// when the next of the others is due (zero when none is left). A notice that arrives later
// only delays its key (up to maxWait), so the next due time can only come later, never sooner,
// until the set is empty again.
func (n *notifier) due(now time.Time) (keys []string, next time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for key, p := range n.pending {
		at := p.last.Add(n.interval)
		if limit := p.first.Add(n.maxWait); limit.Before(at) {
			at = limit
		}
		if !at.After(now) {
			keys = append(keys, key)
			delete(n.pending, key)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return keys, next
}

func (n *notifier) pump(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false // the timer runs until the earliest key is due
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake: // a key's first notice: due an interval from now, no sooner than the others
			if !armed {
				timer.Reset(n.interval)
				armed = true
			}
			continue
		case <-timer.C:
		}
		now := n.now()
		keys, next := n.due(now)
		armed = !next.IsZero()
		if armed {
			timer.Reset(next.Sub(now))
		}
		for _, key := range keys {
			nn := splitKey(key)
			obj := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: nn.Namespace, Name: nn.Name}}
			select {
			case n.out <- event.GenericEvent{Object: obj}:
			case <-ctx.Done():
				return
			}
		}
	}
}

func splitKey(key string) types.NamespacedName {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return types.NamespacedName{Namespace: key[:i], Name: key[i+1:]}
		}
	}
	return types.NamespacedName{Name: key}
}
