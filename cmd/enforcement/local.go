package main

// The local mode: the whole system on one machine with nothing but Go installed. It starts an
// embedded NATS JetStream server and a real kube-apiserver + etcd (the test harness's, built from
// Go modules and cached), installs every CRD, seeds a demo (a static source with three clusters
// and a ClusterRule), builds the hub services and runs them as child processes configured only
// through their environment, exactly as they run in production. It then narrates what happens
// by following the event stream, and stops everything on Ctrl-C.
//
// Decision: the services run as child processes rather than goroutines in this process. Each
// service's run() stays in its own package main (its whole story in one folder), and the local
// mode exercises the same binaries, flags and environment that the images ship.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// hubServices are the services the local mode runs. policy-watcher runs on managed clusters,
// not on the hub, so it is not among them.
var hubServices = []string{"source-scanner", "rule-engine", "argo-syncer", "trigger-dispatcher"}

func runLocal(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	say := func(format string, args ...any) {
		fmt.Fprintf(stdout, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return fmt.Errorf("local mode runs from the repository: %w", err)
	}
	work, err := os.MkdirTemp("", "enforcement-local-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	natsURL := getenv("NATS_URL")
	if natsURL == "" {
		say("Starting NATS JetStream (embedded)")
		ns, err := startEmbeddedNATS(filepath.Join(work, "nats"))
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		natsURL = ns.ClientURL()
	}
	say("NATS ready at %s   (watch: nats sub 'enforcement.>' --server %s)", natsURL, natsURL)

	kubeconfig, cfg, stopKube, err := localKube(ctx, root, getenv, say)
	if err != nil {
		return err
	}
	defer stopKube()
	if err := prepareAPI(ctx, root, cfg, say); err != nil {
		return err
	}

	bin := filepath.Join(work, "bin")
	if prebuilt := getenv("ENFORCEMENT_BIN_DIR"); prebuilt != "" {
		bin = prebuilt
	} else {
		say("Building %s", strings.Join(hubServices, ", "))
		if err := buildServices(ctx, root, bin, stderr); err != nil {
			return err
		}
	}

	nc, err := nats.Connect(natsURL)
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	sub, err := subscribeNarration(nc, say)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()

	procs, err := startServices(ctx, bin, filepath.Join(work, "logs"), natsURL, kubeconfig, getenv, say)
	defer stopServices(procs, say)
	if err != nil {
		if ctx.Err() != nil { // Ctrl-C during start-up is a normal stop
			say("Stopping")
			return nil
		}
		return err
	}
	say("All services ready. Logs: %s. Press Ctrl-C to stop.", filepath.Join(work, "logs"))
	if err := sayNextSteps(work, natsURL, say); err != nil {
		return err
	}

	exited := make(chan string, len(procs))
	for _, p := range procs {
		go func(p *child) { <-p.done; exited <- p.name }(p)
	}
	select {
	case <-ctx.Done():
		say("Stopping")
		return nil
	case name := <-exited:
		return fmt.Errorf("%s exited unexpectedly; see its log in %s", name, filepath.Join(work, "logs", name+".log"))
	}
}

// localKube returns the Kubernetes API the local mode uses: the one KUBECONFIG names, or a
// kube-apiserver + etcd it starts (saying first what a first run has to build). stop ends the
// started one; it does nothing for a given one.
func localKube(ctx context.Context, root string, getenv func(string) string, say func(string, ...any)) (kubeconfig string, cfg *rest.Config, stop func(), err error) {
	kubeconfig, stop = getenv("KUBECONFIG"), func() {}
	if kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return "", nil, nil, fmt.Errorf("KUBECONFIG=%s: %w", kubeconfig, err)
		}
	} else {
		missing, err := missingTools(ctx, root, getenv)
		if err != nil {
			return "", nil, nil, err
		}
		if len(missing) > 0 {
			say("%s", buildNotice(missing, goModCache(ctx)))
		}
		say("Starting a local Kubernetes API (kube-apiserver + etcd)")
		k, err := testenv.NewKube()
		if err != nil {
			return "", nil, nil, fmt.Errorf("start local Kubernetes API: %w", err)
		}
		kubeconfig, cfg, stop = k.Kubeconfig, k.Config, func() { _ = k.Stop() }
	}
	say("Kubernetes API ready   (look: KUBECONFIG=%s kubectl get clusterrules,applications,appprojects -A)", kubeconfig)
	return kubeconfig, cfg, stop, nil
}

// prepareAPI installs the CRDs the services need and seeds the demo.
func prepareAPI(ctx context.Context, root string, cfg *rest.Config, say func(string, ...any)) error {
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths:   []string{filepath.Join(root, "deploy", "k8s", "enforcement-crds", "crds")},
		CRDs:    append(testenv.ArgoCDCRDs(), testenv.OCMCRDs()...),
		MaxTime: time.Minute,
	}); err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	say("Installed CRDs: ClusterRule, Argo CD Application/AppProject/ApplicationSet, OCM ClusterClaim/ManagedCluster/Policy")
	if err := seedDemo(ctx, cfg); err != nil {
		return fmt.Errorf("seed demo: %w", err)
	}
	say("Seeded the demo: ConfigMap %s/%s (3 clusters), Secret %s/%s and ClusterRule %s/demo", localOperatorNamespace, staticConfigMap, localOperatorNamespace, demoSecret, localOperatorNamespace)
	return nil
}

func startEmbeddedNATS(dir string) (*server.Server, error) {
	port := 4222
	if ln, err := net.Listen("tcp", "127.0.0.1:4222"); err != nil {
		port = -1 // taken: any free port
	} else {
		ln.Close()
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("start NATS: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		return nil, errors.New("start NATS: not ready after 15s")
	}
	return ns, nil
}

func buildServices(ctx context.Context, root, bin string, stderr io.Writer) error {
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	for _, s := range hubServices {
		args = append(args, "./services/"+s)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build services: %w", err)
	}
	return nil
}

// child is one running service.
// localAllowedNetworks are the networks the local run opens for outbound calls: loopback, where
// a developer's demo receivers listen. Everything else the services deny stays denied.
const localAllowedNetworks = "127.0.0.0/8,::1"

type child struct {
	name       string
	cmd        *exec.Cmd
	healthAddr string
	logPath    string
	done       chan struct{}
}

// startServices starts every hub service with its environment and waits until each /readyz
// answers 200. Ports are picked free, so the local mode never clashes with another program.
func startServices(ctx context.Context, bin, logs, natsURL, kubeconfig string, getenv func(string) string, say func(string, ...any)) ([]*child, error) {
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	var procs []*child
	for _, name := range hubServices {
		metrics, err := testenv.PickFreeAddr()
		if err != nil {
			return procs, err
		}
		health, err := testenv.PickFreeAddr()
		if err != nil {
			return procs, err
		}
		env := append(os.Environ(),
			"NATS_URL="+natsURL,
			"KUBECONFIG="+kubeconfig,
			"OPERATOR_NAMESPACE="+localOperatorNamespace,
			"ARGOCD_NAMESPACE="+localArgoCDNamespace,
			"SCAN_INTERVAL="+valueOr(getenv("SCAN_INTERVAL"), "5s"),
			"GONE_GRACE_PERIOD="+valueOr(getenv("GONE_GRACE_PERIOD"), "1m"),
			"RESYNC_INTERVAL="+valueOr(getenv("RESYNC_INTERVAL"), "1m"),
			// One replica on the embedded server; pass 3 with NATS_URL of a NATS cluster.
			"STREAM_REPLICAS="+valueOr(getenv("STREAM_REPLICAS"), "1"),
			// Webhooks and template requests.get may reach receivers on this machine (a demo
			// receiver on 127.0.0.1): the services deny loopback unless it is opened.
			"TRIGGER_ALLOWED_NETWORKS="+valueOr(getenv("TRIGGER_ALLOWED_NETWORKS"), localAllowedNetworks),
			"TEMPLATE_HTTP_ALLOWED_NETWORKS="+valueOr(getenv("TEMPLATE_HTTP_ALLOWED_NETWORKS"), localAllowedNetworks),
			"METRICS_ADDR="+metrics,
			"HEALTH_ADDR="+health,
		)
		logPath := filepath.Join(logs, name+".log")
		logFile, err := os.Create(logPath)
		if err != nil {
			return procs, err
		}
		cmd := exec.Command(filepath.Join(bin, name))
		cmd.Env, cmd.Stdout, cmd.Stderr = env, logFile, logFile
		if err := cmd.Start(); err != nil {
			logFile.Close()
			return procs, fmt.Errorf("start %s: %w", name, err)
		}
		c := &child{name: name, cmd: cmd, healthAddr: health, logPath: logPath, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); logFile.Close(); close(c.done) }()
		procs = append(procs, c)
		say("Started %s (metrics http://%s/metrics, health http://%s/readyz)", name, metrics, health)
	}
	for _, c := range procs {
		if err := waitReady(ctx, c); err != nil {
			return procs, err
		}
		say("%s is ready", c.name)
	}
	return procs, nil
}

func waitReady(ctx context.Context, c *child) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			if c.logPath == "" {
				return fmt.Errorf("%s exited before it was ready (%s)", c.name, c.cmd.ProcessState)
			}
			return fmt.Errorf("%s exited before it was ready (%s); the end of %s:\n%s", c.name, c.cmd.ProcessState, c.logPath, logTail(c.logPath, 10))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := http.Get("http://" + c.healthAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("%s not ready after 2m", c.name)
}

// stopServices sends SIGTERM to every service, waits up to 20 s for them to drain, then kills.
func stopServices(procs []*child, say func(string, ...any)) {
	var wg sync.WaitGroup
	for _, c := range procs {
		wg.Add(1)
		go func(c *child) {
			defer wg.Done()
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.done:
				say("Stopped %s", c.name)
			case <-time.After(20 * time.Second):
				_ = c.cmd.Process.Kill()
				<-c.done
				say("Killed %s (it did not stop within 20s)", c.name)
			}
		}(c)
	}
	wg.Wait()
}

// logTail returns the last n lines of the file at path, or why it cannot be read.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func valueOr(v, def string) string {
	if v != "" {
		return v
	}
	return def
}

// subscribeNarration says narrate's line for every event published on nc from now on.
func subscribeNarration(nc *nats.Conn, say func(string, ...any)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(events.SubjectRoot+".>", func(m *nats.Msg) {
		if line := narrate(m); line != "" {
			say("%s", line)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s.>: %w", events.SubjectRoot, err)
	}
	return sub, nil
}

// narrate turns one event into a line a person can follow; "" for events not worth a line.
func narrate(m *nats.Msg) string {
	if strings.HasPrefix(m.Subject, events.SubjectRoot+".deadletter.") {
		return fmt.Sprintf("Dead letter from %s: %s", m.Header.Get(events.HeaderDeadConsumer), m.Header.Get(events.HeaderDeadReason))
	}
	e, _, err := events.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		return "Undecodable event on " + m.Subject + ": " + err.Error()
	}
	return narrateEvent(e)
}

// narrateEvent is narrate's line for a decoded event; "" for events not worth a line as they
// happen (explainLine has one for every event).
func narrateEvent(e events.Event) string {
	switch e := e.(type) {
	case *events.ClusterAppeared:
		eligible := "eligible"
		if !e.Cluster.Eligible {
			eligible = "not eligible yet: " + e.Cluster.State
		}
		return fmt.Sprintf("Discovered cluster %s (%s, %s)", e.Cluster.Name, e.Cluster.Source.Kind, eligible)
	case *events.ClusterUpdated:
		return fmt.Sprintf("Cluster %s changed: %s", e.Cluster.Name, strings.Join(e.Changed, ", "))
	case *events.ClusterGone:
		return fmt.Sprintf("Cluster %s is gone from its source", e.Name)
	case *events.SourceDegraded:
		return fmt.Sprintf("Source %s/%s degraded (%s): %s; nothing removed", e.Source.Kind, e.Source.ID, e.Reason, e.Message)
	case *events.SourceRecovered:
		return fmt.Sprintf("Source %s/%s recovered: a complete listing again", e.Source.Kind, e.Source.ID)
	case *events.SourceListed:
		return fmt.Sprintf("Source %s/%s listed completely: %d cluster(s)", e.Source.Kind, e.Source.ID, e.Known)
	case *events.RemovalsReleased:
		return fmt.Sprintf("Released the removals trip %d of source %s/%s holds: %s", e.Trip, e.Source.Kind, e.Source.ID, strings.Join(e.Clusters, ", "))
	case *events.RuleRemovalsReleased:
		return fmt.Sprintf("Released the uninstalls generation %d of rule %s/%s holds: %s", e.Rule.Generation, e.Rule.Namespace, e.Rule.Name, strings.Join(e.Clusters, ", "))
	case *events.RolloutApproved:
		return fmt.Sprintf("Approved step %s of the rollout of rule %s generation %d (by %s)", e.Step, e.Rule, e.Rule.Generation, valueOr(e.By, "-"))
	case *events.RolloutProgressed:
		return rolloutLine(e)
	case *events.ApplicationHealth:
		line := fmt.Sprintf("Argo CD reports Application %s on %s: %s, %s", e.Application, e.Cluster, valueOr(e.Health, "no health"), valueOr(e.Sync, "no sync status"))
		if e.Operation != "" {
			line += ", last sync " + e.Operation
		}
		if e.Message != "" {
			line += ": " + e.Message
		}
		return line
	case *events.InstallIntent:
		return fmt.Sprintf("Rule %s wants %s on %s", e.Rule, e.Enforcement.Name, e.Cluster.Name)
	case *events.UninstallIntent:
		return fmt.Sprintf("Rule %s lets go of %s on %s (%s)", e.Rule, e.Enforcement, e.Cluster.Name, e.Reason)
	case *events.InstallSucceeded:
		if e.Restored != "" {
			return fmt.Sprintf("Restored Application %s/%s (deleted or edited by hand, or lost to an outage)", localArgoCDNamespace, e.Application)
		}
		if e.Created {
			return fmt.Sprintf("Created Application %s/%s", localArgoCDNamespace, e.Application)
		}
		return fmt.Sprintf("Updated Application %s/%s", localArgoCDNamespace, e.Application)
	case *events.InstallGated:
		return fmt.Sprintf("Install of %s on %s waits for its beforeInstall webhook", e.Intent.Enforcement.Name, e.Intent.Cluster.Name)
	case *events.InstallFailed:
		return fmt.Sprintf("Install of %s on %s failed (%s): %s", e.Enforcement, e.Cluster, e.Reason, e.Message)
	case *events.UninstallDone:
		if e.Deleted && e.Restored != "" {
			return fmt.Sprintf("Deleted Application %s/%s again: no rule wants it", localArgoCDNamespace, e.Application)
		}
		if e.Deleted {
			return fmt.Sprintf("Deleted Application %s/%s", localArgoCDNamespace, e.Application)
		}
		return ""
	case *events.TriggerDelivered:
		return fmt.Sprintf("Delivered %s webhook for %s on %s", e.Phase, e.Enforcement, e.Cluster)
	case *events.TriggerAttempted:
		if e.WillRetry {
			return fmt.Sprintf("%s webhook for %s on %s: attempt %d %s, retrying in %s", e.Phase, e.Enforcement, e.Cluster,
				e.Attempt, e.Result, time.Duration(e.RetryInMillis)*time.Millisecond)
		}
		return "" // the outcome event follows and says how it ended
	case *events.TriggerFailed:
		return fmt.Sprintf("%s webhook for %s on %s failed: %s", e.Phase, e.Enforcement, e.Cluster, e.Message)
	}
	return ""
}

// sayNextSteps points a first user at the operator commands, with the demo rule written next to
// the logs so that an edit of it can be previewed before it is applied.
func sayNextSteps(work, natsURL string, say func(string, ...any)) error {
	rule := filepath.Join(work, "demo-rule.yaml")
	if err := os.WriteFile(rule, []byte(demoRule), 0o644); err != nil {
		return fmt.Errorf("write the demo rule: %w", err)
	}
	cli := "NATS_URL=" + natsURL + " go run ./cmd/enforcement"
	say("Before applying a rule edit, preview it: edit %s, then   %s preview -f %s", rule, cli, rule)
	say("Why does a cluster have what it has:   %s explain cluster demo-eu-1   (or explain rule %s/demo)", cli, localOperatorNamespace)
	say("Every decision as it happens:   %s events --follow --cluster demo-eu-1", cli)
	return nil
}

// rolloutLine tells one move of a rule's staged rollout.
func rolloutLine(e *events.RolloutProgressed) string {
	rollout := fmt.Sprintf("rollout of rule %s generation %d", e.Rule, e.Rule.Generation)
	switch e.Phase {
	case events.RolloutStepStarted:
		return fmt.Sprintf("Step %s of the %s started on %d cluster(s): %s", e.Step, rollout, len(e.Clusters), strings.Join(e.Clusters, ", "))
	case events.RolloutAwaitingApproval:
		return fmt.Sprintf("Step %s of the %s waits for an approval: enforcement approve %s %s", e.Step, rollout, e.Rule, e.Step)
	case events.RolloutBaking:
		return fmt.Sprintf("Step %s of the %s is Healthy and Synced; baking", e.Step, rollout)
	case events.RolloutStepCompleted:
		return fmt.Sprintf("Step %s of the %s completed", e.Step, rollout)
	case events.RolloutHalted:
		return fmt.Sprintf("The %s halted at step %s: %s on %s is %s", rollout, e.Step, e.Application, strings.Join(e.Clusters, ", "), e.Message)
	case events.RolloutCompleted:
		return fmt.Sprintf("The %s completed: every cluster runs it", rollout)
	}
	return fmt.Sprintf("The %s: %s at step %s", rollout, e.Phase, e.Step)
}
