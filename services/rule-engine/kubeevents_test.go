package main

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// describedEvent is one line of the Events table kubectl describe prints for an object.
type describedEvent struct {
	Type, Reason, From, Message string
	Count                       int32
}

func (d describedEvent) String() string {
	return fmt.Sprintf("%s\t%s\t(x%d)\t%s\t%s", d.Type, d.Reason, d.Count, d.From, d.Message)
}

// describeEvents lists the Events of a ClusterRule as `kubectl describe clusterrule` does: the
// core/v1 Events whose involvedObject is the rule (name, namespace, kind and uid, the field
// selector kubectl builds through the same client-go Search), oldest first.
func describeEvents(t *testing.T, e *env, name string) []describedEvent {
	t.Helper()
	cr := e.rule(name)
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(e.kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Events(e.ns).Search(scheme, cr)
	if err != nil {
		t.Fatal(err)
	}
	items := list.Items
	sort.SliceStable(items, func(i, j int) bool { return eventTime(items[i]).Before(eventTime(items[j])) })
	var out []describedEvent
	for _, ev := range items {
		if ev.InvolvedObject.UID != cr.UID || ev.InvolvedObject.Kind != "ClusterRule" {
			t.Errorf("event %s regards %+v, not the rule", ev.Name, ev.InvolvedObject)
		}
		out = append(out, describedEvent{Type: ev.Type, Reason: ev.Reason, From: ev.Source.Component,
			Message: strings.TrimSpace(ev.Message), Count: max(ev.Count, 1)})
	}
	return out
}

func eventTime(ev corev1.Event) time.Time {
	if !ev.EventTime.IsZero() {
		return ev.EventTime.Time
	}
	return ev.FirstTimestamp.Time
}

// appsInEvents sums "for <n> application(s)" over the Events of a reason, each counted as often
// as the API server counted it, and collects their messages.
func appsInEvents(evs []describedEvent, reason string) (apps int, messages []string) {
	re := regexp.MustCompile(`for (\d+) application\(s\) on \d+ cluster\(s\)`)
	for _, ev := range evs {
		if ev.Reason != reason {
			continue
		}
		messages = append(messages, ev.Message)
		if m := re.FindStringSubmatch(ev.Message); m != nil {
			n, _ := strconv.Atoi(m[1])
			apps += n * int(ev.Count)
		}
	}
	return apps, messages
}

// TestRuleEventsTellTheDecisions: the Events kubectl describe lists for a rule tell its story:
// the Ready condition as it moves (NoClusters, InstallFailed as a Warning, Installed; a
// Progressing in between may or may not be seen by a status pass), the
// install intents published, the installs argo-syncer confirmed and the one it failed (with its
// message), and the uninstalls of a cluster that stopped matching, with their reason.
func TestRuleEventsTellTheDecisions(t *testing.T) {
	e := newEnv(t)
	e.vars["RULE_EVENT_INTERVAL"] = "0s" // every reconcile tells what is pending: the whole story, in order
	e.start()
	e.createRule("dev", v1beta1.ClusterRuleSpec{
		Enforcements: twoEnforcements(),
		Source:       v1beta1.Source{Rancher: &v1beta1.RancherSource{Labels: map[string]string{"cattle.io/creator": "norman"}}},
	})
	e.waitReady("dev", v1beta1.ReasonNoClusters, nil)
	a, b := testCluster("a", norman, true), testCluster("b", norman, true)
	e.publish(appeared(a, 1), appeared(b, 2))
	got := e.waitIntentSet("install a guestbook", "install a helm-guestbook", "install b guestbook", "install b helm-guestbook")
	for _, ev := range got {
		in := ev.(*events.InstallIntent)
		if in.Cluster.Name == "b" && in.Enforcement.Name == "helm-guestbook" {
			e.publish(&events.InstallFailed{IntentID: in.ID(), Rule: in.Rule, Cluster: "b", Enforcement: "helm-guestbook",
				Reason: "Invalid", Message: "Application.argoproj.io is invalid", Permanent: true})
			continue
		}
		e.publish(&events.InstallSucceeded{IntentID: in.ID(), Rule: in.Rule, Cluster: in.Cluster.Name,
			Enforcement: in.Enforcement.Name, Application: in.Cluster.Name + "-" + in.Enforcement.Name, Created: true, SpecHash: in.SpecHash})
	}
	e.waitReady("dev", v1beta1.ReasonInstallFailed, nil)
	b.Labels = map[string]string{"cattle.io/creator": "admin"}
	e.publish(&events.ClusterUpdated{Cluster: b, Revision: 3})
	e.waitIntentSet("install a guestbook", "install a helm-guestbook", "install b guestbook", "install b helm-guestbook",
		"uninstall b guestbook NoLongerMatches", "uninstall b helm-guestbook NoLongerMatches")

	testenv.Eventually(t, 20*time.Second, func() error {
		evs := describeEvents(t, e, "dev")
		var lines, plain []string
		for _, ev := range evs {
			lines = append(lines, ev.String())
			plain = append(plain, ev.Type+"\t"+ev.Reason+"\t"+ev.Message)
			if ev.From != serviceName {
				return fmt.Errorf("event from %q, want %s", ev.From, serviceName)
			}
		}
		table := strings.Join(lines, "\n")
		var missing []string
		for reason, want := range map[string]int{EventInstallsRequested: 4, EventInstallsSucceeded: 3, EventInstallsFailed: 1, EventUninstallsRequested: 2} {
			if apps, _ := appsInEvents(evs, reason); apps != want {
				missing = append(missing, fmt.Sprintf("%s counts %d application(s), want %d", reason, apps, want))
			}
		}
		for _, want := range []string{
			"Normal\tNoClusters\tReady is True: no cluster matches the rule yet",
			"Normal\tInstalled\tReady is True: 2 application(s) installed on 1 cluster(s)",
			"Warning\tInstallFailed\tReady is False: 1 install(s) failed",
			"; last: helm-guestbook on b: Invalid: Application.argoproj.io is invalid",
			"Uninstall intents (NoLongerMatches) for 2 application(s) on 1 cluster(s): b",
		} {
			if !strings.Contains(strings.Join(plain, "\n"), want) {
				missing = append(missing, fmt.Sprintf("no %q", want))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%s\nEvents:\n%s", strings.Join(missing, "\n"), table)
		}
		return nil
	})
}

// TestRuleEventsDoNotFloodOnAThousandClusters: a rule over 1,000 clusters, each appearing in its
// own cluster event (1,000 decisions), writes a handful of Events: at most one per kind and
// RULE_EVENT_INTERVAL, and every install intent is counted in them.
func TestRuleEventsDoNotFloodOnAThousandClusters(t *testing.T) {
	const clusters = 1000
	interval := 2 * time.Second
	e := newEnv(t)
	e.vars["RULE_EVENT_INTERVAL"] = interval.String()
	e.start()
	e.createRule("wide", v1beta1.ClusterRuleSpec{
		Enforcements: twoEnforcements()[:1],
		Source:       v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
	})
	e.waitReady("wide", v1beta1.ReasonNoClusters, nil)
	start := time.Now()
	for i := range clusters {
		e.publish(appeared(testCluster(fmt.Sprintf("c%04d", i), nil, true), uint64(i+1)))
	}
	testenv.Eventually(t, 3*time.Minute, func() error {
		if n := len(e.intents()); n != clusters {
			return fmt.Errorf("%d intents, want %d", n, clusters)
		}
		return nil
	})
	// Every intent is told once the last waiting bucket's interval has passed.
	var evs []describedEvent
	testenv.Eventually(t, 20*time.Second, func() error {
		evs = describeEvents(t, e, "wide")
		if apps, msgs := appsInEvents(evs, EventInstallsRequested); apps != clusters && !combined(msgs) {
			return fmt.Errorf("InstallsRequested Events count %d application(s), want %d: %q", apps, clusters, msgs)
		}
		return nil
	})
	elapsed := time.Since(start)
	// Two kinds of Events can move here (InstallsRequested and the Ready condition), each at most
	// once per interval, plus the first of each at once.
	limit := 2 * (int(elapsed/interval) + 2)
	written := 0
	var lines []string
	for _, ev := range evs {
		written += int(ev.Count)
		lines = append(lines, ev.String())
	}
	if written > limit || written >= clusters/10 {
		t.Errorf("%d Events written for %d decisions in %s, want at most %d:\n%s", written, clusters, elapsed.Round(time.Second), limit, strings.Join(lines, "\n"))
	}
	t.Logf("%d Events (API writes) for %d install decisions in %s", written, clusters, elapsed.Round(time.Second))
}

// combined reports whether the recorder folded some of the messages into a "(combined from
// similar events)" Event (after ten similar Events within ten minutes), which carries only the
// newest counts: then the sum cannot be checked, and the bound on writes is what counts.
func combined(messages []string) bool {
	for _, m := range messages {
		if strings.HasPrefix(m, "(combined from similar events)") {
			return true
		}
	}
	return false
}
