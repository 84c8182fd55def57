package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// BenchmarkInstall1000Clusters measures the time from starting the consumer on 1,000 install
// intents (1,000 new clusters) until every cluster Secret, AppProject and Application exists,
// next to the floor: 1,000 × 3 plain creates of the same objects with the same parallelism
// (16, as many handlers as the test harness runs) on the same API server in the same run. Run
// it with
//
//	go test -run '^$' -bench Install1000 -benchtime 3x
//
// It reports the medians over the iterations and their ratio.
func BenchmarkInstall1000Clusters(b *testing.B) {
	const clusters, parallel = 1000, 16
	var syncerTimes, floorTimes []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		h := newHarness(b)
		var ins []events.Event
		for c := range clusters {
			ins = append(ins, h.installIntent("bench", fmt.Sprintf("bench-%04d", c), "agent"))
		}
		if err := h.pub.PublishAll(context.Background(), ins); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		h.consume()
		// A redelivered intent publishes its outcome again (JetStream drops the duplicate, a plain
		// subscriber still sees it), so count distinct intents.
		done, failures := map[string]bool{}, 0
		for len(done) < clusters {
			switch e := h.outcome(func(events.Event) bool { return true }).(type) {
			case *events.InstallSucceeded:
				done[e.IntentID] = true
			case *events.InstallFailed:
				failures++
				if failures == 1 {
					b.Logf("first install failure: %s: %s", e.Reason, e.Message)
				}
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		if failures > 0 {
			b.Logf("%d transient install failures (retried)", failures)
		}
		syncerTimes = append(syncerTimes, elapsed)
		h.checkCounts(clusters)

		floor := h.plainCreates(clusters, parallel)
		floorTimes = append(floorTimes, floor)
		b.Logf("iteration %d: argo-syncer %s, plain creates %s", i, elapsed.Round(time.Millisecond), floor.Round(time.Millisecond))
	}
	s, f := median(syncerTimes), median(floorTimes)
	b.ReportMetric(s.Seconds(), "syncer-s")
	b.ReportMetric(f.Seconds(), "floor-s")
	b.ReportMetric(s.Seconds()/f.Seconds(), "ratio")
	b.Logf("median over %d: argo-syncer %s, floor %s, ratio %.2f", b.N, s.Round(time.Millisecond), f.Round(time.Millisecond), s.Seconds()/f.Seconds())
}

func (h *harness) checkCounts(n int) {
	ctx := context.Background()
	apps, err1 := h.argo.ArgoprojV1alpha1().Applications(h.ns).List(ctx, metav1.ListOptions{})
	projects, err2 := h.argo.ArgoprojV1alpha1().AppProjects(h.ns).List(ctx, metav1.ListOptions{})
	secrets, err3 := h.kube.CoreV1().Secrets(h.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelSecretType + "=cluster"})
	if err1 != nil || err2 != nil || err3 != nil {
		h.t.Fatal(err1, err2, err3)
	}
	if len(apps.Items) != n || len(projects.Items) != n || len(secrets.Items) != n {
		h.t.Fatalf("%d Applications, %d AppProjects, %d Secrets; want %d each", len(apps.Items), len(projects.Items), len(secrets.Items), n)
	}
}

// plainCreates creates the same n × 3 objects in a fresh namespace with plain POSTs, parallel
// workers at a time, and returns how long that took.
func (h *harness) plainCreates(n, parallel int) time.Duration {
	ctx := context.Background()
	ns := h.ns + "-floor"
	if _, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range jobs {
				in := h.installIntent("bench", fmt.Sprintf("bench-%04d", c), "agent")
				sec, _ := RenderClusterSecret(ns, in.Cluster, argov1.ClusterConfig{BearerToken: "t"})
				_, err := h.kube.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
				if err == nil {
					p := RenderProject(ns, newNames(in.Cluster.Name, ""), in.Cluster.Name, in.Cluster.URL, []string{in.Enforcement.Repo}, ProjectSettings{ClusterResources: true})
					_, err = h.argo.ArgoprojV1alpha1().AppProjects(ns).Create(ctx, &argov1.AppProject{
						ObjectMeta: metav1.ObjectMeta{Name: p.Metadata.Name, Namespace: ns, Labels: p.Metadata.Labels},
						Spec:       p.Spec.(argov1.AppProjectSpec)}, metav1.CreateOptions{})
				}
				if err == nil {
					a := RenderApplication(ns, in, newNames(in.Cluster.Name, in.Enforcement.Name))
					_, err = h.argo.ArgoprojV1alpha1().Applications(ns).Create(ctx, &argov1.Application{
						ObjectMeta: metav1.ObjectMeta{Name: a.Metadata.Name, Namespace: ns, Labels: a.Metadata.Labels, Annotations: a.Metadata.Annotations},
						Spec:       a.Spec.(argov1.ApplicationSpec)}, metav1.CreateOptions{})
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	for c := range n {
		jobs <- c
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		h.t.Fatal(firstErr)
	}
	return elapsed
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
