package main

// Kubernetes Events on ClusterRules. The stream is the durable record of every decision; Events
// are the short story an operator reads with `kubectl describe clusterrule`: what the engine
// asked for (install and uninstall intents), what came back (installs confirmed or failed,
// failing triggers) and where the Ready condition went.
//
// A rule over 1,000 clusters must not write 1,000 Events, so decisions are not recorded one by
// one. They are counted per rule and per kind (a "bucket": installs requested, uninstalls
// requested for one reason, installs confirmed, installs failed, triggers failed), and a bucket
// becomes one Event at most once per RULE_EVENT_INTERVAL (the first one at once), naming how many
// applications and clusters, and a few cluster names. The Ready condition is one more bucket: its
// Event tells the reason the rule has now when that differs from the last one told, so a rule
// that goes Progressing → Installed → Progressing while clusters trickle in tells it once per
// interval, not twice per cluster. Buckets are written when the controller reconciles the rule
// (the engine notifies it after every decision), and a bucket that has to wait requeues the rule
// for the moment it may be written.
//
// Why core/v1 Events (client-go tools/record) rather than events.k8s.io/v1 (tools/events): in
// client-go v0.31 the events.k8s.io recorder folds every Event with the same reason on the same
// object within six minutes into a series of the first one, keeping the first note, so the newest
// counts (and the newest Ready message) would never reach the API server. The core/v1 recorder
// counts only identical messages as repeats, and after ten similar ones within ten minutes writes
// one "(combined from similar events)" Event that always carries the newest message. kubectl
// describe lists core/v1 Events (the API server serves both groups from one store). The
// recorder's own spam filter (by default 25 Events per object, then one per five minutes, dropped
// silently) is keyed here per object and reason and sized above what the buckets can produce, so
// it is a safety net that never hides a decision.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Reasons of the Events the rule engine records on a ClusterRule. The Ready condition's Events
// use the condition's own reason (pkg/api/v1beta1/conditions.go); these are plural so that they
// never read as one of those.
const (
	EventInstallsRequested   = "InstallsRequested"   // install intents published
	EventUninstallsRequested = "UninstallsRequested" // uninstall intents published (the note names their reason)
	EventInstallsSucceeded   = "InstallsSucceeded"   // argo-syncer confirmed installs
	EventInstallsFailed      = "InstallsFailed"      // argo-syncer reported failed installs
	EventTriggersFailed      = "TriggersFailed"      // failurePolicy Fail triggers that failed
)

// eventNoteLimit bounds an Event's message, cut mark included, under 1 kB (the limit
// events.k8s.io/v1 puts on notes; kubectl describe prints the message on one line).
const eventNoteLimit = 1000

// eventSampleNames is how many cluster names an Event's message names.
const eventSampleNames = 5

// readyBucket is the bucket key of the Ready condition's Events.
const readyBucket = "Ready"

// ruleEvents records the Events of every rule; see the file comment. A nil *ruleEvents records
// nothing (tests that drive the engine without an API server).
type ruleEvents struct {
	recorder record.EventRecorder
	interval time.Duration
	now      func() time.Time

	mu    sync.Mutex
	rules map[string]*ruleEventLog // by namespace/name
}

// ruleEventLog is what one rule has still to tell, and when each bucket last told.
type ruleEventLog struct {
	pending map[string]*eventBucket
	last    map[string]time.Time
	// ready is the Ready condition last told ("<status>/<reason>"); empty until known.
	ready string
}

// eventBucket counts the decisions of one kind on one rule since its last Event.
type eventBucket struct {
	eventType, reason string
	// what says what was decided, for the message: "install intents", "uninstall intents
	// (NoLongerMatches)", ...
	what     string
	apps     int
	clusters map[string]struct{}
	// lastMessage is the newest failure's message, for failures.
	lastMessage string
}

// newRuleEvents starts the Event broadcaster (stopped with the service's workers) and returns
// the recorder of rule Events, written at most once per interval and bucket.
func newRuleEvents(svc *service.Service, scheme *runtime.Scheme, interval time.Duration) (*ruleEvents, error) {
	cs, err := kubernetes.NewForConfig(svc.Kube)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	// Spam filter per object and reason, refilled faster than the buckets can spend: with
	// uninstalls of up to four reasons sharing a reason, eight per interval is out of reach.
	qps := float32(1)
	if interval > 0 {
		qps = float32(8 / interval.Seconds())
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: 25,
		QPS:       qps,
		SpamKeyFunc: func(ev *corev1.Event) string {
			o := ev.InvolvedObject
			return strings.Join([]string{ev.Source.Component, o.Kind, o.Namespace, o.Name, string(o.UID), ev.Reason}, "\x00")
		},
	}))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	svc.Go("kubernetes events", func(ctx context.Context) error {
		<-ctx.Done()
		b.Shutdown()
		return nil
	})
	rec := b.NewRecorder(scheme, corev1.EventSource{Component: serviceName})
	return &ruleEvents{recorder: rec, interval: interval, now: time.Now, rules: map[string]*ruleEventLog{}}, nil
}

// logOf returns the rule's log, creating it. Call with r.mu held.
func (r *ruleEvents) logOf(key string) *ruleEventLog {
	l := r.rules[key]
	if l == nil {
		l = &ruleEventLog{pending: map[string]*eventBucket{}, last: map[string]time.Time{}}
		r.rules[key] = l
	}
	return l
}

// add counts one decision of the bucket named key on rule on cluster.
func (r *ruleEvents) add(rule, key, eventType, reason, what, cluster, message string) {
	l := r.logOf(rule)
	b := l.pending[key]
	if b == nil {
		b = &eventBucket{eventType: eventType, reason: reason, what: what, clusters: map[string]struct{}{}}
		l.pending[key] = b
	}
	b.apps++
	b.clusters[cluster] = struct{}{}
	if message != "" {
		b.lastMessage = message
	}
}

// intents counts published intents and returns the keys of the rules they concern (which the
// engine notifies, so that their Events are written).
func (r *ruleEvents) intents(evs []events.Event) []string {
	if r == nil || len(evs) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rules := map[string]bool{}
	for _, ev := range evs {
		switch i := ev.(type) {
		case *events.InstallIntent:
			key := i.Rule.Namespace + "/" + i.Rule.Name
			rules[key] = true
			r.add(key, EventInstallsRequested, corev1.EventTypeNormal, EventInstallsRequested, "install intents", i.Cluster.Name, "")
		case *events.UninstallIntent:
			key := i.Rule.Namespace + "/" + i.Rule.Name
			rules[key] = true
			r.add(key, EventUninstallsRequested+"/"+i.Reason, corev1.EventTypeNormal, EventUninstallsRequested,
				"uninstall intents ("+i.Reason+")", i.Cluster.Name, "")
		}
	}
	return slices.Sorted(maps.Keys(rules))
}

// outcome counts an install or trigger outcome that changed a rule's state (foldOutcome calls it
// once per outcome event, never for a redelivery).
func (r *ruleEvents) outcome(ev events.Event) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o := ev.(type) {
	case *events.InstallSucceeded:
		r.add(o.Rule.Namespace+"/"+o.Rule.Name, EventInstallsSucceeded, corev1.EventTypeNormal, EventInstallsSucceeded,
			"installs confirmed", o.Cluster, "")
	case *events.InstallFailed:
		r.add(o.Rule.Namespace+"/"+o.Rule.Name, EventInstallsFailed, corev1.EventTypeWarning, EventInstallsFailed,
			"installs failed", o.Cluster, fmt.Sprintf("%s on %s: %s: %s", o.Enforcement, o.Cluster, o.Reason, o.Message))
	case *events.TriggerFailed:
		r.add(o.Rule.Namespace+"/"+o.Rule.Name, EventTriggersFailed, corev1.EventTypeWarning, EventTriggersFailed,
			"triggers failed", o.Cluster, fmt.Sprintf("%s on %s: %s trigger: %s", o.Enforcement, o.Cluster, o.Phase, o.Message))
	}
}

// reconciled writes the rule's Events that are due, after the controller computed (and wrote)
// its status: the Ready condition when it differs from the last one told, then the buckets.
// before is the Ready condition the object had before this reconcile (nil: none), which is what
// a replica that just started or took over last told. It returns requeue, shortened to when the
// next waiting bucket may be written.
func (r *ruleEvents) reconciled(cr *v1beta1.ClusterRule, before *metav1.Condition, requeue time.Duration) time.Duration {
	if r == nil {
		return requeue
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.logOf(cr.Namespace + "/" + cr.Name)
	if l.ready == "" && before != nil {
		l.ready = conditionKey(before)
	}
	now := r.now()
	wait := func(bucket string) time.Duration {
		last, ok := l.last[bucket]
		if !ok {
			return 0
		}
		return last.Add(r.interval).Sub(now)
	}
	due := func(d time.Duration) bool {
		if d > 0 && (requeue == 0 || d < requeue) {
			requeue = d
		}
		return d <= 0
	}
	if cur := meta.FindStatusCondition(cr.Status.Conditions, v1beta1.ConditionReady); cur != nil && conditionKey(cur) != l.ready {
		if due(wait(readyBucket)) {
			r.recorder.Event(cr, readyEventType(cur), cur.Reason, truncate(fmt.Sprintf("Ready is %s: %s", cur.Status, cur.Message), eventNoteLimit))
			l.ready, l.last[readyBucket] = conditionKey(cur), now
		}
	}
	for _, key := range slices.Sorted(maps.Keys(l.pending)) {
		if due(wait(key)) {
			r.write(cr, l.pending[key])
			delete(l.pending, key)
			l.last[key] = now
		}
	}
	return requeue
}

// deleting writes every bucket of a rule being deleted at once (its uninstall intents were just
// published; the object is gone after the finalizer), and forgets the rule.
func (r *ruleEvents) deleting(cr *v1beta1.ClusterRule) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := cr.Namespace + "/" + cr.Name
	if l := r.rules[key]; l != nil {
		for _, k := range slices.Sorted(maps.Keys(l.pending)) {
			r.write(cr, l.pending[k])
		}
	}
	delete(r.rules, key)
}

// forget drops what a rule that no longer exists had still to tell (there is no object left to
// tell it on).
func (r *ruleEvents) forget(key string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.rules, key)
}

// write records one bucket as one Event: "<what> for <n> application(s) on <m> cluster(s):
// a, b, c, d, e and 12 more", and the newest failure's message for failures.
func (r *ruleEvents) write(cr *v1beta1.ClusterRule, b *eventBucket) {
	names := slices.Sorted(maps.Keys(b.clusters))
	sample := strings.Join(names[:min(len(names), eventSampleNames)], ", ")
	if more := len(names) - eventSampleNames; more > 0 {
		sample += fmt.Sprintf(" and %d more", more)
	}
	msg := fmt.Sprintf("%s for %d application(s) on %d cluster(s): %s", capitalize(b.what), b.apps, len(names), sample)
	if b.lastMessage != "" {
		msg += "; last: " + b.lastMessage
	}
	r.recorder.Event(cr, b.eventType, b.reason, truncate(msg, eventNoteLimit))
}

// readyConditionOf is a copy of the rule's Ready condition, nil when it has none.
func readyConditionOf(cr *v1beta1.ClusterRule) *metav1.Condition {
	c := meta.FindStatusCondition(cr.Status.Conditions, v1beta1.ConditionReady)
	if c == nil {
		return nil
	}
	cp := *c
	return &cp
}

// conditionKey identifies a condition's state for the Ready bucket: status and reason (a new
// message with the same reason, such as a count that moved, is not a new story).
func conditionKey(c *metav1.Condition) string { return string(c.Status) + "/" + c.Reason }

// readyEventType is Warning for a Ready condition that needs someone's attention: False for any
// reason but Progressing.
func readyEventType(c *metav1.Condition) string {
	if c.Status == metav1.ConditionFalse && c.Reason != v1beta1.ReasonProgressing {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// capitalize upper-cases the first letter of an ASCII message.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
