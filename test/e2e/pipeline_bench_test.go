package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
)

// benchParallel is the floor's number of clients: plain writes of the same objects from 16
// goroutines without a client-side rate limit.
const benchParallel = 16

// pipelineRule is the benchmark's rule number i: it selects every cluster of the fake Rancher
// (Google's driver) and installs one package, pipelineEnforcement(i), from a repository of its own
// with one Helm value (1), so each rule gives every cluster an Application of its own and adds a
// repository to its AppProject. Rule 0 is "pipeline", the rule edited.
func pipelineRule(i int) string {
	name := "pipeline"
	if i > 0 {
		name = fmt.Sprintf("pipeline-%d", i)
	}
	return fmt.Sprintf(`apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: %[1]s
spec:
  enforcements:
    - name: %[2]s
      repo: https://git.example/%[2]s
      path: charts/agent
      namespace: monitoring
      helm:
        parameters:
          replicaCount: 1
  source:
    rancher:
      filters:
        driver: googleKubernetesEngine
`, name, pipelineEnforcement(i))
}

// pipelineEnforcement names rule i's package; a cluster's Application of it is
// "<cluster>-<package>".
func pipelineEnforcement(i int) string {
	if i == 0 {
		return "agent"
	}
	return fmt.Sprintf("agent-%d", i)
}

// BenchmarkPipeline measures the built hub services, with their shipped defaults, end to end on
// a fresh real API server and NATS, next to the floor of the same writes measured in the same
// run on the same API server. Only for the new clusters is source-scanner restarted with a
// SCAN_INTERVAL of 1 s, so that each is found at once, not within the shipped 30 s. PIPELINE_CLUSTERS (N, default 1,000) clusters, PIPELINE_RULES (R,
// default 1) rules that each give every cluster one Application:
//
//   - create: the N clusters appear in a Rancher that pages 100 at a time, until each has its R
//     Applications (from the first "cluster appeared" event to the last Application), against
//     plain parallel creates of the same N cluster Secrets, N AppProjects and R × N Applications,
//     with the CPU of every process meanwhile, the API server's requests and the NATS server's
//     traffic (messages in and out, JetStream API requests; messages in an Application);
//   - edit: rule 0's Helm value changes, until its N Applications carry it, against plain
//     parallel updates of as many Applications, and against the same edit by server-side apply;
//   - new cluster: PIPELINE_NEW clusters (default 100) appear one at a time into the full fleet;
//     the time from each one's "cluster appeared" event to the last of its R Applications
//     (median, 99th percentile, slowest), and the share of it up to its last install intent;
//   - memory: each service's resident set at idle (the rules applied, no cluster yet) and after
//     the run, their difference per cluster, and the peak (VmHWM); and its live heap (after a
//     full collection, through its PPROF_ADDR) at idle and after the run: what it keeps, without
//     the collector's headroom and the pages the runtime has not returned yet.
//
// PIPELINE_ENV (space-separated NAME=value) runs the services with a tuning on top of their
// defaults, printed with the figures. PIPELINE_PROFILES (a directory) saves each service's heap
// profile there at the end of the run, after a collection (<service>-<N>x<R>-heap.pprof; read
// it with go tool pprof -sample_index=inuse_space), and its CPU profiles of the create, one a
// cpuProfileWindow from the clusters' appearance until the window in which the last Application
// was created ends (<service>-<N>x<R>-create-cpu-<k>.pprof; go tool pprof merges the windows
// given together), and the benchmark process's own CPU profile of the create, the embedded NATS
// server among it (benchmark-<N>x<R>-create-cpu.pprof). It prints the figures and their ratios to the floor, and from a setting's
// second run in one process on the medians of its runs so far (recordPipelineRun); it asserts
// no timing.
func BenchmarkPipeline(b *testing.B) {
	n := envCount(b, "PIPELINE_CLUSTERS", 1000)
	rules := envCount(b, "PIPELINE_RULES", 1)
	newClusters := envCount(b, "PIPELINE_NEW", 100)
	tuning := os.Getenv("PIPELINE_ENV")
	for range b.N {
		pipelineRound(b, n, rules, newClusters, tuning)
	}
}

// serviceEnv reads PIPELINE_ENV's value, space-separated NAME=value settings given to every
// service on top of the shipped defaults, to measure a tuning beside them; LOG_LEVEL=info unless
// set.
func serviceEnv(b *testing.B, v string) map[string]string {
	env := map[string]string{"LOG_LEVEL": "info"}
	for _, kv := range strings.Fields(v) {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			b.Fatalf("PIPELINE_ENV=%q: %q is not NAME=value", v, kv)
		}
		env[name] = value
	}
	return env
}

// envCount reads a whole number >= 1 from the environment variable name, def when unset.
func envCount(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a whole number >= 1", name, v)
	}
	return n
}

func pipelineRound(b *testing.B, n, rules, newClusters int, tuning string) {
	profiles := os.Getenv("PIPELINE_PROFILES")
	env := serviceEnv(b, tuning)
	_, scanTuned := env["SCAN_INTERVAL"]
	s := newSystemWith(b, env, natsSingle, func(s *system) { s.benchSetUp(b, scanTuned) })
	apps := watchPipelineApps(b, s)
	appeared := watchAppeared(b, s)
	for i := range rules {
		s.applyRule(operatorNS, pipelineRule(i))
	}
	// The idle baseline: the services up, the rules read, no cluster yet.
	time.Sleep(3 * time.Second)
	idle, idleLive := map[string]int{}, map[string]int{}
	for _, name := range hubServices {
		idle[name], idleLive[name] = s.memoryKB(name, "VmRSS"), s.liveHeapKB(name)
	}

	fleet := make([]map[string]any, 0, n+newClusters)
	for i := range n {
		fleet = append(fleet, gke(fmt.Sprintf("c-%05d", i), fmt.Sprintf("bench-%05d", i), "active", nil))
	}
	cpuBefore, writesBefore, requestsBefore, busBefore := s.cpuTimes(), argoSyncerWrites(b, s), apiRequests(b, s), s.busTraffic(b)
	var cpuProfiles *cpuProfiler
	if profiles != "" {
		cpuProfiles = s.profileCPU(profiles, fmt.Sprintf("%dx%d-create", n, rules))
	}
	s.rancher.SetClusters(fleet...)
	waitFor(b, time.Hour, fmt.Sprintf("%d Applications", rules*n), func() bool { return apps.count("1") == rules*n })
	cpuProfileFiles := cpuProfiles.stop()
	cpuCreate, writesCreate, requestsCreate, busCreate := s.cpuTimes(), argoSyncerWrites(b, s), apiRequests(b, s), s.busTraffic(b)
	b.Logf("API server requests during the create: %s", countsSpent(requestsBefore, requestsCreate, 12))
	b.Logf("NATS server during the create: %s; %.1f messages in an Application", countsSpent(busBefore, busCreate, len(busCreate)),
		float64(busCreate[busMessagesIn]-busBefore[busMessagesIn])/float64(rules*n))
	create := apps.last("1").Sub(appeared.first())
	// Where the time went: the last cluster announced, the last intent published.
	stages := fmt.Sprintf("last cluster appeared at %s, last install intent at %s; argo-syncer's writes: %s",
		appeared.last(&events.ClusterAppeared{}).Sub(appeared.first()).Round(time.Millisecond),
		appeared.last(&events.InstallIntent{}).Sub(appeared.first()).Round(time.Millisecond),
		countsSpent(writesBefore, writesCreate, len(writesCreate)))
	fl := measureFloors(b, s, n, rules)
	createFloor := fl.create

	ed := editRule(b, s, apps, appeared, n, rules, profiles)
	cpuProfileFiles = append(cpuProfileFiles, ed.profiles...)
	edit, editIntents := ed.took, ed.intents
	editFloor, editApplyFloor := fl.floor.updateAll(), fl.applier.reapplyAll()

	if !scanTuned {
		s.scanEverySecond()
	}
	latencies, toIntents := newClusterLatencies(b, s, apps, appeared, fleet, rules, newClusters)
	slices.Sort(latencies)
	slices.Sort(toIntents)
	median, p99 := percentile(latencies, 50), percentile(latencies, 99)

	b.ReportMetric(create.Seconds(), "create-s")
	b.ReportMetric(createFloor.Seconds(), "create-floor-s")
	b.ReportMetric(edit.Seconds(), "edit-s")
	b.ReportMetric(editFloor.Seconds(), "edit-floor-s")
	b.ReportMetric(float64(median.Microseconds())/1000, "new-cluster-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "new-cluster-p99-ms")
	run := pipelineRun{createRatio: create.Seconds() / createFloor.Seconds(), applyRatio: create.Seconds() / fl.apply.Seconds(),
		editRatio: edit.Seconds() / editFloor.Seconds(), editApplyRatio: edit.Seconds() / editApplyFloor.Seconds(), newCluster: latencies}
	memory := s.memoryGrowth(n+newClusters, idle, idleLive, &run)
	if profiles != "" {
		memory = append(memory, s.saveHeapProfiles(profiles, fmt.Sprintf("%dx%d", n, rules))...)
		memory = append(memory, "    CPU profiles of the create and of the edit, in windows of "+cpuProfileWindow.String()+": "+strings.Join(cpuProfileFiles, " "))
	}
	settings := pipelineSettings(tuning, scanTuned)
	b.Logf("%d clusters, %d rule(s) of one package each, %s:\n"+
		"  create  %8s   floor (%d plain creates, %d clients) %8s   ratio %.2f (%s)\n"+
		"          CPU meanwhile: %s\n"+
		"          floor by server-side apply %8s (ratio to plain creates %.2f; the create's ratio to it %.2f), CPU: creates %s; applies %s\n"+
		"  edit    %8s   floor (%d plain updates) %8s   ratio %.2f (last install intent at %s; argo-syncer's writes: %s)\n"+
		"          CPU meanwhile: %s\n"+
		"          floor by server-side apply %8s (ratio to plain updates %.2f; the edit's ratio to it %.2f)\n"+
		"  one new cluster, event to its last Application, %d in a row: %s\n"+
		"          its share up to its last install intent (rule-engine): %s\n"+
		"  resident memory (the growth is per cluster present at the end; source-scanner's after and peak are its restarted process's where it was restarted):\n%s",
		n, rules, settings, create.Round(time.Millisecond), (2+rules)*n, benchParallel, createFloor.Round(time.Millisecond), create.Seconds()/createFloor.Seconds(), stages,
		cpuSpent(cpuBefore, cpuCreate),
		fl.apply.Round(time.Millisecond), fl.apply.Seconds()/createFloor.Seconds(), create.Seconds()/fl.apply.Seconds(), fl.createCPU, fl.applyCPU,
		edit.Round(time.Millisecond), n, editFloor.Round(time.Millisecond), edit.Seconds()/editFloor.Seconds(), editIntents.Round(time.Millisecond),
		countsSpent(ed.writesBefore, ed.writes, len(ed.writes)),
		cpuSpent(ed.cpuBefore, ed.cpu),
		editApplyFloor.Round(time.Millisecond), editApplyFloor.Seconds()/editFloor.Seconds(), edit.Seconds()/editApplyFloor.Seconds(),
		len(latencies), spread(latencies), spread(toIntents),
		strings.Join(memory, "\n"))
	recordPipelineRun(b, fmt.Sprintf("%d clusters, %d rule(s), %s", n, rules, settings), run)
}

// ruleEdit is what editRule measured: the edit's time, its share up to rule-engine's last
// install intent, argo-syncer's writes and the CPU times before and after, and the CPU
// profiles saved.
type ruleEdit struct {
	took, intents        time.Duration
	writesBefore, writes map[string]int
	cpuBefore, cpu       map[string]time.Duration
	profiles             []string
}

// editRule changes the first rule's Helm value and waits until its n Applications carry it,
// profiling the services' CPU meanwhile in profiles ("" for none).
func editRule(b *testing.B, s *system, apps *pipelineApps, appeared *appearedEvents, n, rules int, profiles string) ruleEdit {
	ed := ruleEdit{writesBefore: argoSyncerWrites(b, s), cpuBefore: s.cpuTimes()}
	var cpuProfiles *cpuProfiler
	if profiles != "" {
		cpuProfiles = s.profileCPU(profiles, fmt.Sprintf("%dx%d-edit", n, rules))
	}
	start := time.Now()
	patch := []byte(`{"spec":{"enforcements":[{"name":"agent","repo":"https://git.example/agent","path":"charts/agent","namespace":"monitoring","helm":{"parameters":{"replicaCount":2}}}]}}`)
	if _, err := s.dyn.Resource(gvrClusterRule).Namespace(operatorNS).Patch(context.Background(), "pipeline", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, time.Hour, fmt.Sprintf("%d Applications updated", n), func() bool { return apps.count("2") == n })
	ed.cpu = s.cpuTimes()
	ed.profiles = cpuProfiles.stop()
	ed.took = apps.last("2").Sub(start)
	// The edit's share of rule-engine (to its last install intent) and of argo-syncer (the rest).
	ed.intents = appeared.last(&events.InstallIntent{}).Sub(start)
	ed.writes = argoSyncerWrites(b, s)
	return ed
}

// memoryGrowth reads each service's resident set, its peak and its live heap after a round and
// returns a line of them for each, with their growth over the idle figures a cluster of the
// clusters present at the end, which it also records in run.
func (s *system) memoryGrowth(clusters int, idle, idleLive map[string]int, run *pipelineRun) []string {
	run.resident, run.live = map[string]float64{}, map[string]float64{}
	var memory []string
	for _, name := range hubServices {
		after, peak := s.memoryKB(name, "VmRSS"), s.memoryKB(name, "VmHWM")
		live := s.liveHeapKB(name)
		run.resident[name] = float64(after-idle[name]) / float64(clusters)
		run.live[name] = float64(live-idleLive[name]) / float64(clusters)
		memory = append(memory, fmt.Sprintf("    %-18s idle %4d MB, after %4d MB (%+.1f KB a cluster), peak %4d MB (%+.1f KB a cluster); live heap idle %3d MB, after %4d MB (%+.1f KB a cluster)",
			name, idle[name]/1024, after/1024, run.resident[name],
			peak/1024, float64(peak-idle[name])/float64(clusters),
			idleLive[name]/1024, live/1024, run.live[name]))
	}
	return memory
}

// benchSetUp readies a system for the benchmark before its services start: the shipped
// SCAN_INTERVAL unless scanTuned (PIPELINE_ENV sets one), the services' live heap figures, and a
// Rancher that pages as a real one does with its default limit.
func (s *system) benchSetUp(b *testing.B, scanTuned bool) {
	if !scanTuned {
		delete(s.env, "SCAN_INTERVAL") // the shipped default, not the harness's
	}
	s.profiles = true // the live heap figures (liveHeapKB)
	s.rancher = rancherfake.New(b, token, 100)
	var secret corev1.Secret
	ctx := context.Background()
	if err := s.kube.Client.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: "rancher"}, &secret); err != nil {
		b.Fatal(err)
	}
	secret.Data["url"], secret.Data["caCert"] = []byte(s.rancher.URL), s.rancher.CACertPEM()
	if err := s.kube.Client.Update(ctx, &secret); err != nil {
		b.Fatal(err)
	}
}

// pipelineSettings describes the services' settings in a round, for its figures.
func pipelineSettings(tuning string, scanTuned bool) string {
	settings := "shipped defaults"
	if tuning != "" {
		settings += " and PIPELINE_ENV=" + strconv.Quote(tuning)
	}
	if !scanTuned {
		settings += " (source-scanner restarted with SCAN_INTERVAL=1s for the new clusters)"
	}
	return settings
}

// scanEverySecond restarts source-scanner with a SCAN_INTERVAL of 1 s, so that each new cluster
// is found by the next scan, not within the shipped 30 s.
func (s *system) scanEverySecond() {
	s.env["SCAN_INTERVAL"] = "1s"
	s.restart("source-scanner")
}

// floors are the floors of a round, measured on the same API server after the services' create:
// the same objects by plain creates and by server-side apply (each kept for an edit floor), each
// in a namespace of its own, with the control plane's CPU time for each.
type floors struct {
	// floor holds the plain creates' objects, applier the server-side applies' (for the edit's
	// floors).
	floor, applier      *floor
	create, apply       time.Duration
	createCPU, applyCPU string
}

func measureFloors(b *testing.B, s *system, n, rules int) floors {
	tmpl := pipelineTemplates(b, s, "bench-00000")
	f := floors{floor: newFloor(b, s.kube.Config, s.kube.Namespace(b, "floor"))}
	before := s.cpuTimes()
	f.create = f.floor.createAll(tmpl, n, rules)
	afterCreate := s.cpuTimes()
	f.applier = newFloor(b, s.kube.Config, s.kube.Namespace(b, "floor-apply"))
	f.apply = f.applier.applyAll(tmpl, n, rules)
	afterApply := s.cpuTimes()
	f.createCPU = cpuSpent(before, afterCreate, "kube-apiserver", "etcd", benchmarkProcess)
	f.applyCPU = cpuSpent(afterCreate, afterApply, "kube-apiserver", "etcd", benchmarkProcess)
	return f
}

// cpuSpent lists the CPU time each process spent between two cpuTimes readings: those named, or
// the hub services and the control plane.
func cpuSpent(before, after map[string]time.Duration, names ...string) string {
	if len(names) == 0 {
		names = append(slices.Clone(hubServices), "kube-apiserver", "etcd", benchmarkProcess)
	}
	var out []string
	for _, name := range names {
		if _, ok := after[name]; ok {
			out = append(out, fmt.Sprintf("%s %.1f s", name, (after[name]-before[name]).Seconds()))
		}
	}
	return strings.Join(out, ", ")
}

// argoSyncerWrites is argo-syncer's count of write requests so far, by object kind and verb
// ("Application create"), from its /metrics page.
func argoSyncerWrites(b *testing.B, s *system) map[string]int {
	b.Helper()
	s.mu.Lock()
	addr := s.procs["argo-syncer"].metrics
	s.mu.Unlock()
	return metricCounts(get(b, "http://"+addr+"/metrics"), func(name string, labels map[string]string) string {
		if name != "enforcement_argo_syncer_api_writes_total" {
			return ""
		}
		return labels["kind"] + " " + labels["verb"]
	})
}

// apiRequests is the API server's count so far of the requests it served, by verb and resource,
// and of the watch events it sent, by kind, from its /metrics.
func apiRequests(b *testing.B, s *system) map[string]int {
	b.Helper()
	page, err := discovery.NewDiscoveryClientForConfigOrDie(s.kube.Config).RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return metricCounts(string(page), func(name string, labels map[string]string) string {
		switch name {
		case "apiserver_request_total":
			return strings.TrimSuffix(labels["verb"]+" "+labels["resource"]+"/"+labels["subresource"], "/")
		case "apiserver_watch_events_total":
			return "watch event " + labels["kind"]
		}
		return ""
	})
}

// metricCounts sums the samples of a Prometheus text page by key(metric name, labels), skipping
// those whose key is "".
func metricCounts(page string, key func(name string, labels map[string]string) string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(page, "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		labelText, value, _ := strings.Cut(rest, "} ")
		labels := map[string]string{}
		for _, kv := range strings.Split(labelText, ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		if k := key(name, labels); k != "" {
			n, _ := strconv.ParseFloat(value, 64)
			out[k] += int(n)
		}
	}
	return out
}

// countsSpent lists the top counts that grew between two readings, largest first.
func countsSpent(before, after map[string]int, top int) string {
	keys := slices.Collect(maps.Keys(after))
	slices.SortFunc(keys, func(a, b string) int { return (after[b] - before[b]) - (after[a] - before[a]) })
	var out []string
	for _, k := range keys[:min(top, len(keys))] {
		if d := after[k] - before[k]; d > 0 {
			out = append(out, fmt.Sprintf("%s %d", k, d))
		}
	}
	return strings.Join(out, ", ")
}

// spread describes sorted durations: "median …, p99 …, slowest …", to a tenth of a millisecond.
func spread(sorted []time.Duration) string {
	return fmt.Sprintf("median %s, p99 %s, slowest %s", percentile(sorted, 50).Round(100*time.Microsecond),
		percentile(sorted, 99).Round(100*time.Microsecond), sorted[len(sorted)-1].Round(100*time.Microsecond))
}

// percentile is the p-th percentile of sorted (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

// newClusterLatencies adds count clusters to the fleet one at a time and returns, for each, the
// time from its "cluster appeared" event to the last of its Applications (one a rule; rule 0's
// carry the edited value 2), and the share of it up to its last install intent (rule-engine's;
// the rest is the bus and argo-syncer).
func newClusterLatencies(b *testing.B, s *system, apps *pipelineApps, appeared *appearedEvents, fleet []map[string]any, rules, count int) (latencies, toIntents []time.Duration) {
	for i := range count {
		name := fmt.Sprintf("bench-new-%03d", i)
		fleet = append(fleet, gke(fmt.Sprintf("c-new-%03d", i), name, "active", nil))
		s.rancher.SetClusters(fleet...)
		var last time.Time
		waitFor(b, time.Minute, name+"'s Applications", func() bool {
			last = time.Time{}
			for r := range rules {
				value := "1"
				if r == 0 {
					value = "2"
				}
				at := apps.seen(name+"-"+pipelineEnforcement(r), value)
				if at.IsZero() {
					return false
				}
				if at.After(last) {
					last = at
				}
			}
			return true
		})
		latencies = append(latencies, last.Sub(appeared.at(name)))
		toIntents = append(toIntents, appeared.lastIntentFor(name).Sub(appeared.at(name)))
	}
	return latencies, toIntents
}

// waitFor polls cond every 50 ms until it holds, or fails the benchmark after limit.
func waitFor(b *testing.B, limit time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("no %s within %s", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memoryKB is a field of the service process's /proc status in KiB: "VmRSS" (resident now) or
// "VmHWM" (the peak resident set); 0 when unknown.
func (s *system) memoryKB(name, field string) int {
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	return 0
}

// liveHeapKB is a service's live heap in KiB: its heap after a full collection, which the
// profile endpoint runs before it answers (system.profiles).
func (s *system) liveHeapKB(name string) int {
	for _, line := range strings.Split(string(s.heapProfile(name, "debug=1&gc=1")), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			bytes, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				s.t.Fatalf("heap of %s: %q: %v", name, line, err)
			}
			return bytes / 1024
		}
	}
	s.t.Fatalf("heap of %s: the profile has no HeapAlloc line", name)
	return 0
}

// saveHeapProfiles saves each hub service's heap profile after a collection in dir, as
// <service>-<label>-heap.pprof, and returns a line naming each file.
func (s *system) saveHeapProfiles(dir, label string) []string {
	var lines []string
	for _, name := range hubServices {
		path := filepath.Join(dir, fmt.Sprintf("%s-%s-heap.pprof", name, label))
		s.saveHeapProfile(name, path)
		lines = append(lines, "    heap profile after a collection: "+path)
	}
	return lines
}

// saveHeapProfile saves the heap profile of a service started with system.profiles to path,
// after a collection (the profile's in-use figures are then the live heap).
func (s *system) saveHeapProfile(name, path string) {
	if err := os.WriteFile(path, s.heapProfile(name, "gc=1"), 0o644); err != nil {
		s.t.Fatalf("heap profile of %s: %v", name, err)
	}
}

// heapProfile returns the heap profile a service started with system.profiles serves for the
// query.
func (s *system) heapProfile(name, query string) []byte {
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	body, err := getBody("http://" + p.pprof + "/debug/pprof/heap?" + query)
	if err != nil {
		s.t.Fatalf("heap profile of %s: %v", name, err)
	}
	return body
}

// benchmarkProcess names the benchmark's own process in cpuTimes: it runs the embedded NATS
// server, the fake Rancher, the watches that time the run and the floors' clients, on the same
// cores as the services.
const benchmarkProcess = "benchmark process"

// cpuTimes is the CPU time so far (user and system) of each hub service, of the control plane
// behind it, "kube-apiserver" and "etcd", and of the benchmark's own process (benchmarkProcess).
func (s *system) cpuTimes() map[string]time.Duration {
	out := map[string]time.Duration{}
	if t, ok := processCPU(os.Getpid()); ok {
		out[benchmarkProcess] = t
	}
	for _, name := range hubServices {
		s.mu.Lock()
		p := s.procs[name]
		s.mu.Unlock()
		if t, ok := processCPU(p.cmd.Process.Pid); ok {
			out[name] = t
		}
	}
	for name, pid := range controlPlanePIDs(s.kube.Config.Host) {
		if t, ok := processCPU(pid); ok {
			out[name] = t
		}
	}
	return out
}

const busMessagesIn = "messages in"

// busTraffic is the NATS server's counts so far: the messages its clients sent (publishes, KV
// writes, requests, acknowledgements: what it had to route), the messages it delivered, and the
// JetStream API requests among them (direct gets of KV entries are not API requests).
func (s *system) busTraffic(b *testing.B) map[string]int {
	b.Helper()
	varz, err := s.nats.Server().Varz(nil)
	if err != nil {
		b.Fatal(err)
	}
	jsz, err := s.nats.Server().Jsz(nil)
	if err != nil {
		b.Fatal(err)
	}
	return map[string]int{busMessagesIn: int(varz.InMsgs), "messages out": int(varz.OutMsgs), "JetStream API requests": int(jsz.API.Total)}
}

// processCPU is a process's CPU time so far, from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	// The fields after the command name, which is in parentheses: utime and stime are the
	// 12th and 13th, in clock ticks (100 a second on Linux).
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, false
	}
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// controlPlanePIDs finds, by their command lines, the kube-apiserver serving host
// ("https://127.0.0.1:<port>/") and the etcd it stores in; either is missing when not found.
func controlPlanePIDs(host string) map[string]int {
	u, err := url.Parse(host)
	if err != nil {
		return nil
	}
	port := u.Port()
	cmdlines := map[int][]string{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil {
			cmdlines[pid] = strings.Split(string(data), "\x00")
		}
	}
	pids := map[string]int{}
	var etcdURL string
	for pid, args := range cmdlines {
		if len(args) == 0 || filepath.Base(args[0]) != "kube-apiserver" || !slices.Contains(args, "--secure-port="+port) {
			continue
		}
		pids["kube-apiserver"] = pid
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--etcd-servers="); ok {
				etcdURL = v
			}
		}
	}
	for pid, args := range cmdlines {
		if etcdURL != "" && len(args) > 0 && filepath.Base(args[0]) == "etcd" && slices.Contains(args, "--listen-client-urls="+etcdURL) {
			pids["etcd"] = pid
		}
	}
	return pids
}

// pipelineApps records, from a watch of the Argo CD namespace, when each Application was first
// seen with each value of its replicaCount Helm parameter.
type pipelineApps struct {
	mu     sync.Mutex
	seenAt map[string]map[string]time.Time // value → name → first seen
}

// watchPipelineApps records when each Application is first seen with each replicaCount. It is
// the benchmark's instrument, so it costs the pipeline as little CPU as it can: the floor's
// objects are not watched. Its watch reads only the name and the Helm parameters of each
// Application (pipelineAppEvent) instead of decoding each whole, managed fields included,
// which took 1.8 s of the benchmark process's CPU during a 1,000 × 10 create (of about 75 s
// the create spends on the two cores).
func watchPipelineApps(b *testing.B, s *system) *pipelineApps {
	a := &pipelineApps{seenAt: map[string]map[string]time.Time{}}
	httpClient, err := rest.HTTPClientFor(s.kube.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		rv := ""
		for ctx.Err() == nil {
			var err error
			if rv, err = a.watch(ctx, httpClient, s.kube.Config.Host, rv); err != nil && ctx.Err() == nil {
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	return a
}

// pipelineAppEvent is what the benchmark reads of a watch event of an Application.
type pipelineAppEvent struct {
	Type   watch.EventType `json:"type"`
	Object struct {
		Metadata struct {
			Name            string `json:"name"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			Source struct {
				Helm struct {
					Parameters []struct {
						Name  string `json:"name"`
						Value string `json:"value"`
					} `json:"parameters"`
				} `json:"helm"`
			} `json:"source"`
		} `json:"spec"`
	} `json:"object"`
}

// replicaCount is the Application's replicaCount Helm parameter ("" without one).
func (e *pipelineAppEvent) replicaCount() string {
	for _, p := range e.Object.Spec.Source.Helm.Parameters {
		if p.Name == "replicaCount" {
			return p.Value
		}
	}
	return ""
}

// watch watches the Applications of argoNS from resource version rv ("": all of them first)
// until the stream ends, and returns the version to resume from ("" after an expired one).
func (a *pipelineApps) watch(ctx context.Context, httpClient *http.Client, host, rv string) (string, error) {
	q := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}}
	if rv != "" {
		q.Set("resourceVersion", rv)
	}
	u := strings.TrimSuffix(host, "/") + "/apis/" + gvrApplication.Group + "/" + gvrApplication.Version + "/namespaces/" + argoNS + "/applications?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return rv, err
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return rv, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return rv, fmt.Errorf("watch Applications: %s", res.Status)
	}
	dec := json.NewDecoder(res.Body)
	for {
		var e pipelineAppEvent
		if err := dec.Decode(&e); errors.Is(err, io.EOF) {
			return rv, nil // the server ended the watch (its timeout): resume at once
		} else if err != nil {
			return rv, err
		}
		at := time.Now()
		switch e.Type {
		case watch.Error: // the version expired: list afresh
			return "", nil
		case watch.Added, watch.Modified:
			a.record(e.replicaCount(), e.Object.Metadata.Name, at)
		}
		if e.Object.Metadata.ResourceVersion != "" {
			rv = e.Object.Metadata.ResourceVersion
		}
	}
}

func (a *pipelineApps) record(value, name string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seenAt[value] == nil {
		a.seenAt[value] = map[string]time.Time{}
	}
	if _, ok := a.seenAt[value][name]; !ok {
		a.seenAt[value][name] = at
	}
}

func (a *pipelineApps) count(value string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seenAt[value])
}

func (a *pipelineApps) seen(name, value string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seenAt[value][name]
}

// last is when the last Application was first seen with value.
func (a *pipelineApps) last(value string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var last time.Time
	for _, t := range a.seenAt[value] {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// appearedEvents records the time of each "cluster appeared" event (its CloudEvents time, set
// by source-scanner when it publishes), by cluster name.
type appearedEvents struct {
	mu    sync.Mutex
	times map[string]time.Time
	// lastOf is the time of the last event of each type, for the stages of the create.
	lastOf map[string]time.Time
	// lastIntent is the time of the last install intent for each cluster, by cluster name: a
	// new cluster's share of rule-engine.
	lastIntent map[string]time.Time
}

func watchAppeared(b *testing.B, s *system) *appearedEvents {
	a := &appearedEvents{times: map[string]time.Time{}, lastOf: map[string]time.Time{}, lastIntent: map[string]time.Time{}}
	nc, err := nats.Connect(s.nats.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	appeared, intent := (&events.ClusterAppeared{}).Type(), (&events.InstallIntent{}).Type()
	// What the benchmark needs of an event is its type and time (headers) and, of a cluster
	// appearing and of an install intent, the cluster's name: the rest of the bus's traffic
	// is not decoded, so that this instrument takes little of the pipeline's CPU.
	_, err = nc.Subscribe(events.SubjectRoot+".>", func(m *nats.Msg) {
		typ := m.Header.Get(events.HeaderType)
		at, err := time.Parse(time.RFC3339Nano, m.Header.Get(events.HeaderTime))
		if err != nil {
			return
		}
		var named struct {
			Cluster struct {
				Name string `json:"name"`
			} `json:"cluster"`
		}
		if typ == appeared || typ == intent {
			if err := json.Unmarshal(m.Data, &named); err != nil {
				return
			}
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if at.After(a.lastOf[typ]) {
			a.lastOf[typ] = at
		}
		switch typ {
		case appeared:
			if _, seen := a.times[named.Cluster.Name]; !seen {
				a.times[named.Cluster.Name] = at
			}
		case intent:
			if at.After(a.lastIntent[named.Cluster.Name]) {
				a.lastIntent[named.Cluster.Name] = at
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func (a *appearedEvents) at(name string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.times[name]
}

// lastIntentFor is the time of the last install intent sent for the named cluster.
func (a *appearedEvents) lastIntentFor(name string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastIntent[name]
}

// last is the time of the last event of e's type.
func (a *appearedEvents) last(e events.Event) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastOf[e.Type()]
}

func (a *appearedEvents) first() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first time.Time
	for _, t := range a.times {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// pipelineTemplate is one cluster's objects as the services wrote them, stripped of what the
// API server sets, for the floor to write again under other names.
type pipelineTemplate struct {
	secret, project, app *unstructured.Unstructured
}

func pipelineTemplates(b *testing.B, s *system, cluster string) pipelineTemplate {
	b.Helper()
	ctx := context.Background()
	get := func(gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
		u, err := s.dyn.Resource(gvr).Namespace(argoNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatalf("the floor's template %s %s: %v", gvr.Resource, name, err)
		}
		clean := &unstructured.Unstructured{Object: map[string]any{}}
		for k, v := range u.Object {
			if k != "metadata" && k != "status" {
				clean.Object[k] = v
			}
		}
		clean.SetLabels(u.GetLabels())
		clean.SetAnnotations(u.GetAnnotations())
		return clean
	}
	secrets, err := s.dyn.Resource(gvrSecret).Namespace(argoNS).List(ctx, metav1.ListOptions{LabelSelector: "argocd.argoproj.io/secret-type=cluster"})
	if err != nil {
		b.Fatal(err)
	}
	var secretName string
	for _, sec := range secrets.Items {
		if strings.Contains(sec.GetName(), cluster) {
			secretName = sec.GetName()
		}
	}
	if secretName == "" {
		b.Fatalf("no cluster Secret for %s", cluster)
	}
	return pipelineTemplate{secret: get(gvrSecret, secretName), project: get(gvrAppProject, cluster), app: get(gvrApplication, cluster+"-agent")}
}

// floor writes the same objects as plainly as the API allows: benchParallel clients, no
// client-side rate limit, one request per object.
type floor struct {
	b    *testing.B
	dyn  dynamic.Interface
	ns   string
	apps []*unstructured.Unstructured // as created, for the updates
}

func newFloor(b *testing.B, cfg *rest.Config, ns string) *floor {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return &floor{b: b, dyn: dyn, ns: ns}
}

// parallel runs do(i) for i in [0, n) on benchParallel goroutines and returns the elapsed time.
func (f *floor) parallel(n int, do func(i int) error) time.Duration {
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range benchParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(i); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		f.b.Fatalf("floor: %v", firstErr)
	}
	return time.Since(start)
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// createAll creates, for each of n clusters, its Secret, its AppProject and the Applications of
// rules packages: (2 + rules) × n objects. The first package's Applications are kept for updateAll.
func (f *floor) createAll(t pipelineTemplate, n, rules int) time.Duration {
	return f.writeAll(t, n, rules, func(r dynamic.ResourceInterface, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		got, err := r.Create(context.Background(), u, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%s %s exists already", u.GetKind(), u.GetName())
		}
		return got, err
	})
}

// applyAll writes the objects of createAll by server-side apply, as argo-syncer does: what the
// write method costs the API server, next to plain creates.
func (f *floor) applyAll(t pipelineTemplate, n, rules int) time.Duration {
	return f.writeAll(t, n, rules, func(r dynamic.ResourceInterface, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return r.Apply(context.Background(), u.GetName(), u, metav1.ApplyOptions{FieldManager: "floor", Force: true})
	})
}

func (f *floor) writeAll(t pipelineTemplate, n, rules int, write func(dynamic.ResourceInterface, *unstructured.Unstructured) (*unstructured.Unstructured, error)) time.Duration {
	f.apps = make([]*unstructured.Unstructured, n)
	copyOf := func(tmpl *unstructured.Unstructured, name string) *unstructured.Unstructured {
		u := tmpl.DeepCopy()
		u.SetName(name)
		u.SetNamespace(f.ns)
		return u
	}
	perCluster := 2 + rules
	return f.parallel(perCluster*n, func(i int) error {
		c := fmt.Sprintf("floor-%05d", i/perCluster)
		switch k := i % perCluster; k {
		case 0:
			_, err := write(f.dyn.Resource(gvrSecret).Namespace(f.ns), copyOf(t.secret, "cluster-"+c))
			return err
		case 1:
			_, err := write(f.dyn.Resource(gvrAppProject).Namespace(f.ns), copyOf(t.project, c))
			return err
		default:
			got, err := write(f.dyn.Resource(gvrApplication).Namespace(f.ns), copyOf(t.app, c+"-"+pipelineEnforcement(k-2)))
			if k == 2 {
				f.apps[i/perCluster] = got
			}
			return err
		}
	})
}

// updateAll changes the Helm value of every Application the floor created, one update each.
func (f *floor) updateAll() time.Duration {
	return f.editAll(func(r dynamic.ResourceInterface, u *unstructured.Unstructured) error {
		_, err := r.Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
}

// reapplyAll changes the Helm value of every Application applyAll wrote by applying it again,
// as argo-syncer writes a rule edit: what the edit's write method costs the API server, next to
// plain updates.
func (f *floor) reapplyAll() time.Duration {
	return f.editAll(func(r dynamic.ResourceInterface, u *unstructured.Unstructured) error {
		u.SetManagedFields(nil) // an apply states what it owns, never the ownership records
		u.SetResourceVersion("")
		_, err := r.Apply(context.Background(), u.GetName(), u, metav1.ApplyOptions{FieldManager: "floor", Force: true})
		return err
	})
}

// editAll writes the rule edit's Helm value into every Application the floor wrote, one write
// each.
func (f *floor) editAll(write func(dynamic.ResourceInterface, *unstructured.Unstructured) error) time.Duration {
	return f.parallel(len(f.apps), func(i int) error {
		u, err := editedApplication(f.apps[i])
		if err != nil {
			return err
		}
		return write(f.dyn.Resource(gvrApplication).Namespace(f.ns), u)
	})
}

// editedApplication is a copy of the floor's Application app with the rule edit's Helm value.
func editedApplication(app *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	u := app.DeepCopy()
	params, _, _ := unstructured.NestedSlice(u.Object, "spec", "source", "helm", "parameters")
	for _, p := range params {
		if m, ok := p.(map[string]any); ok && m["name"] == "replicaCount" {
			m["value"] = "2"
		}
	}
	if err := unstructured.SetNestedSlice(u.Object, params, "spec", "source", "helm", "parameters"); err != nil {
		return nil, err
	}
	return u, nil
}

// cpuProfileWindow is the length of each CPU profile the pipeline benchmark takes during the
// create: the profile endpoint profiles for a time set in advance, and the create's is not known.
const cpuProfileWindow = 10 * time.Second

// cpuProfiler takes CPU profiles of every hub service started with system.profiles, one window
// after the other, and of the benchmark's own process, until stopped.
type cpuProfiler struct {
	own   *os.File // the benchmark process's profile, nil if it could not start
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	files []string
}

// profileCPU starts profiling each hub service's CPU, saving window k of service name as
// <dir>/<name>-<label>-cpu-<k>.pprof.
func (s *system) profileCPU(dir, label string) *cpuProfiler {
	p := &cpuProfiler{done: make(chan struct{})}
	// The benchmark's own process (the embedded NATS server, the fake Rancher, the benchmark's
	// watches) in one profile for the whole create.
	own := filepath.Join(dir, fmt.Sprintf("benchmark-%s-cpu.pprof", label))
	if f, err := os.Create(own); err != nil {
		s.t.Errorf("CPU profile of the benchmark process: %v", err)
	} else if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		s.t.Errorf("CPU profile of the benchmark process: %v", err)
	} else {
		p.own, p.files = f, append(p.files, own)
	}
	for _, name := range hubServices {
		s.mu.Lock()
		addr := s.procs[name].pprof
		s.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for k := 0; ; k++ {
				select {
				case <-p.done:
					return
				default:
				}
				body, err := getBody(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(cpuProfileWindow.Seconds())))
				if err != nil {
					s.t.Errorf("CPU profile of %s: %v", name, err)
					return
				}
				path := filepath.Join(dir, fmt.Sprintf("%s-%s-cpu-%d.pprof", name, label, k))
				if err := os.WriteFile(path, body, 0o644); err != nil {
					s.t.Errorf("CPU profile of %s: %v", name, err)
					return
				}
				p.mu.Lock()
				p.files = append(p.files, path)
				p.mu.Unlock()
			}
		}()
	}
	return p
}

// stop waits for the windows under way to end and returns the files saved, sorted; nil for a
// nil profiler.
func (p *cpuProfiler) stop() []string {
	if p == nil {
		return nil
	}
	close(p.done)
	if p.own != nil {
		pprof.StopCPUProfile()
		p.own.Close()
	}
	p.wg.Wait()
	slices.Sort(p.files)
	return p.files
}

// getBody returns the body of a successful GET of url.
func getBody(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
