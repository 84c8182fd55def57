package k8s

// Lint and render tests: no API server needed.

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// defaultRelease is where the default-values cases install.
var defaultRelease = release{name: "enforcement", namespace: "enforcement"}

// customValues are non-default values for each chart: every common knob changed at once plus
// the chart's own configuration, so that one render exercises every optional branch.
func customValues(chartName string) map[string]any {
	vals := map[string]any{
		"image":            map[string]any{"repository": "registry.example/enf/" + chartName, "tag": "1.2.3", "pullPolicy": "Always"},
		"imagePullSecrets": []any{map[string]any{"name": "registry"}},
		"fullnameOverride": chartName + "-custom",
		"commonLabels":     map[string]any{"team": "platform"},
		"logLevel":         "debug",
		"nats": map[string]any{
			"url": "nats://nats.messaging:4222", "existingSecret": "nats-user", "existingSecretKey": "user.creds",
		},
		"serviceAccount": map[string]any{"name": chartName + "-sa", "annotations": map[string]any{"example.com/role": "x"}},
		"podAnnotations": map[string]any{"example.com/scrape": "true"},
		"podLabels":      map[string]any{"tier": "control"},
		"ports":          map[string]any{"metrics": 9090, "health": 9091},
		"service":        map[string]any{"metricsPort": 9090, "healthPort": 9091},
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}, "interval": "15s", "scrapeTimeout": "10s"},
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "100m", "memory": "128Mi"},
			"limits":   map[string]any{"cpu": "1", "memory": "512Mi"},
		},
		"extraEnv":          []any{map[string]any{"name": "GOMEMLIMIT", "value": "400MiB"}},
		"extraEnvFrom":      []any{map[string]any{"configMapRef": map[string]any{"name": "extra"}}},
		"priorityClassName": "system-cluster-critical",
		"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}},
	}
	switch chartName {
	case "source-scanner":
		vals["replicaCount"] = 0
		vals["config"] = map[string]any{"operatorNamespace": "enf-system", "scanInterval": "1m", "goneGracePeriod": "30m",
			"maxRemovalFraction": "0.25", "listTimeout": "2m"}
		vals["rbac"] = map[string]any{"managedClusters": true}
	case "rule-engine":
		vals["config"] = map[string]any{"operatorNamespace": "enf-system", "watchNamespaces": []any{"team-a", "team-b"},
			"templateHTTPAllow": []any{"api.example.com", "cmdb.example.com"}, "templateHTTPTimeout": "3s",
			"templateHTTPAllowedNetworks": []any{"10.20.0.0/16", "fd12::/16"}, "templateHTTPDeniedNetworks": []any{"203.0.113.0/24"}, "sourceDegradedTTL": "5m", "statusInterval": "2s", "ruleEventInterval": "1m", "maxRemovalFraction": "0.2"}
		vals["replicaCount"] = 2
		vals["strategy"] = map[string]any{"type": "RollingUpdate"}
		vals["leaderElection"] = map[string]any{"enabled": true, "namespace": "enf-leases",
			"leaseDuration": "20s", "renewDeadline": "15s", "retryPeriod": "3s"}
		vals["podDisruptionBudget"] = map[string]any{"minAvailable": "50%"}
	case "argo-syncer":
		vals["config"] = map[string]any{"operatorNamespace": "enf-system", "argocdNamespace": "gitops", "syncConcurrency": 4,
			"kubeQPS": 50, "kubeBurst": 80, "projectSourceRepos": "*", "projectClusterResources": "none",
			"sourceSecretTTL": "1m", "resyncInterval": "5m", "shutdownTimeout": "20s"}
		vals["rbac"] = map[string]any{"sourceSecretNamespaces": []any{"enf-system", "team-a"}}
		vals["replicaCount"] = 1
		vals["strategy"] = map[string]any{"type": "Recreate"}
		vals["leaderElection"] = map[string]any{"enabled": false}
	case "trigger-dispatcher":
		vals["replicaCount"] = 3
		vals["config"] = map[string]any{"defaultTimeout": "10s", "maxAttempts": 7,
			"backoffBase": "1s", "backoffMax": "1m", "blockedRetryInterval": "0", "deniedNetworks": "203.0.113.0/24", "maxTimeout": "1m",
			"allowedNetworks": "10.0.0.0/8", "consumerBackoffBase": "2s"}
		vals["rbac"] = map[string]any{"signingSecretNamespaces": []any{"team-a", "team-b"}}
	case "policy-watcher":
		vals["config"] = map[string]any{"watchNamespace": "cluster1", "clusterName": "prod-1", "pollIntervalSec": "10",
			"stableDurationSec": "30", "targetClaimName": "compliance"}
	}
	return vals
}

// wantEnv is the chart's own environment for default values (defaultRelease) and for
// customValues, on top of the common METRICS_ADDR / HEALTH_ADDR / NATS ones.
var wantEnv = map[string]struct{ defaults, custom map[string]string }{
	"source-scanner": {
		defaults: map[string]string{"OPERATOR_NAMESPACE": "enforcement", "SCAN_INTERVAL": "30s", "GONE_GRACE_PERIOD": "10m", "MAX_REMOVAL_FRACTION": "0.1",
			"LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": "enforcement"},
		custom: map[string]string{"OPERATOR_NAMESPACE": "enf-system", "SCAN_INTERVAL": "1m", "GONE_GRACE_PERIOD": "30m",
			"MAX_REMOVAL_FRACTION": "0.25", "LIST_TIMEOUT": "2m", "LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": "enf-system"},
	},
	"rule-engine": {
		defaults: map[string]string{"OPERATOR_NAMESPACE": "enforcement", "LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": "enforcement"},
		custom: map[string]string{"OPERATOR_NAMESPACE": "enf-system", "WATCH_NAMESPACES": "team-a,team-b",
			"TEMPLATE_HTTP_ALLOW": "api.example.com,cmdb.example.com", "TEMPLATE_HTTP_TIMEOUT": "3s",
			"TEMPLATE_HTTP_ALLOWED_NETWORKS": "10.20.0.0/16,fd12::/16", "TEMPLATE_HTTP_DENIED_NETWORKS": "203.0.113.0/24", "SOURCE_DEGRADED_TTL": "5m",
			"STATUS_INTERVAL": "2s", "RULE_EVENT_INTERVAL": "1m", "MAX_REMOVAL_FRACTION": "0.2", "LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": "enf-leases",
			"LEADER_ELECTION_LEASE_DURATION": "20s", "LEADER_ELECTION_RENEW_DEADLINE": "15s", "LEADER_ELECTION_RETRY_PERIOD": "3s"},
	},
	"argo-syncer": {
		defaults: map[string]string{"OPERATOR_NAMESPACE": "enforcement", "ARGOCD_NAMESPACE": "argocd",
			"LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": "enforcement"},
		custom: map[string]string{"OPERATOR_NAMESPACE": "enf-system", "ARGOCD_NAMESPACE": "gitops", "SYNC_CONCURRENCY": "4",
			"KUBE_QPS": "50", "KUBE_BURST": "80", "PROJECT_SOURCE_REPOS": "*", "PROJECT_CLUSTER_RESOURCES": "none",
			"SOURCE_SECRET_TTL": "1m", "RESYNC_INTERVAL": "5m", "SHUTDOWN_TIMEOUT": "20s"},
	},
	"trigger-dispatcher": {
		defaults: map[string]string{"LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": "enforcement"},
		custom: map[string]string{"LEADER_ELECTION": "true", "LEADER_ELECTION_NAMESPACE": "enf-system", "TRIGGER_DEFAULT_TIMEOUT": "10s", "TRIGGER_MAX_ATTEMPTS": "7",
			"TRIGGER_BACKOFF_BASE": "1s", "TRIGGER_BACKOFF_MAX": "1m", "TRIGGER_BLOCKED_RETRY_INTERVAL": "0",
			"TRIGGER_DENIED_NETWORKS": "203.0.113.0/24", "TRIGGER_MAX_TIMEOUT": "1m", "TRIGGER_ALLOWED_NETWORKS": "10.0.0.0/8", "CONSUMER_BACKOFF_BASE": "2s"},
	},
	"policy-watcher": {
		defaults: map[string]string{"WATCH_NAMESPACE": "enforcement"},
		custom: map[string]string{"WATCH_NAMESPACE": "cluster1", "CLUSTER_NAME": "prod-1", "POLL_INTERVAL_SEC": "10",
			"STABLE_DURATION_SEC": "30", "TARGET_CLAIM_NAME": "compliance"},
	},
}

func TestLint(t *testing.T) {
	for _, name := range append(slices.Clone(serviceCharts), enforcementCRDs) {
		cases := map[string]map[string]any{"defaults": nil}
		if name != enforcementCRDs {
			cases["custom"] = customValues(name)
		}
		for caseName, vals := range cases {
			t.Run(name+"/"+caseName, func(t *testing.T) {
				for _, m := range lintChart(name, "enforcement", vals) {
					t.Errorf("helm lint: %s", m)
				}
			})
		}
	}
}

// TestLintCatchesBrokenChart shows that TestLint can fail: a template with a syntax error and
// a Chart.yaml without a version are reported.
func TestLintCatchesBrokenChart(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "Chart.yaml"), "apiVersion: v2\nname: broken\n")
	writeFile(t, filepath.Join(dir, "values.yaml"), "{}\n")
	writeFile(t, filepath.Join(dir, "templates", "cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name \n")
	if msgs := lintChart(dir, "default", nil); len(msgs) < 2 {
		t.Fatalf("want the missing version and the parse error reported, got %v", msgs)
	}
}

func TestRenderDefaults(t *testing.T) {
	for _, name := range serviceCharts {
		t.Run(name, func(t *testing.T) {
			ch := loadChart(t, name)
			objs := mustRender(t, name, defaultRelease, nil)
			checkCommon(t, name, objs, ch.Metadata.AppVersion)
			dep := deployment(t, objs)
			c := dep.Spec.Template.Spec.Containers[0]
			if got, want := c.Image, "enforcement/"+name+":"+ch.Metadata.AppVersion; got != want {
				t.Errorf("image %q, want %q", got, want)
			}
			wantReplicas := int32(2) // the hub services: two, with leader election
			if name == "policy-watcher" {
				wantReplicas = 1
			}
			if got := *dep.Spec.Replicas; got != wantReplicas {
				t.Errorf("replicas %d, want %d", got, wantReplicas)
			}
			env := envMap(t, c)
			want := map[string]string{"METRICS_ADDR": ":8080", "HEALTH_ADDR": ":8081"}
			if name != "policy-watcher" { // policy-watcher without NATS writes the claim itself
				want["NATS_URL"] = "nats://nats:4222"
				want["STREAM_REPLICAS"] = "3" // the 3-node NATS cluster production runs
			}
			maps.Copy(want, wantEnv[name].defaults)
			if !maps.Equal(env, want) {
				t.Errorf("env\n got %v\nwant %v", env, want)
			}
			if got := find(objs, "ServiceMonitor", ""); len(got) != 0 {
				t.Error("ServiceMonitor rendered by default")
			}
			if got := find(objs, "Secret", ""); len(got) != 0 {
				t.Error("Secret rendered without NATS credentials")
			}
			if sa := one(t, objs, "ServiceAccount"); sa.GetName() != dep.Spec.Template.Spec.ServiceAccountName {
				t.Errorf("pods run as %q, chart creates ServiceAccount %q", dep.Spec.Template.Spec.ServiceAccountName, sa.GetName())
			}
			if len(c.Resources.Requests) == 0 || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %v: want requests and a memory limit", c.Resources)
			}
		})
	}
}

func TestRenderCustomValues(t *testing.T) {
	for _, name := range serviceCharts {
		t.Run(name, func(t *testing.T) {
			vals := customValues(name)
			objs := mustRender(t, name, release{name: "custom", namespace: "enf-system"}, vals)
			checkCommon(t, name, objs, "1.2.3")
			dep := deployment(t, objs)
			if dep.Name != name+"-custom" {
				t.Errorf("name %q, want fullnameOverride %q", dep.Name, name+"-custom")
			}
			if want := int32(valueInt(vals["replicaCount"], 1)); *dep.Spec.Replicas != want {
				t.Errorf("replicas %d, want %d", *dep.Spec.Replicas, want)
			}
			pod := dep.Spec.Template.Spec
			c := pod.Containers[0]
			if c.Image != "registry.example/enf/"+name+":1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("image %q %s", c.Image, c.ImagePullPolicy)
			}
			env := envMap(t, c)
			want := map[string]string{"METRICS_ADDR": ":9090", "HEALTH_ADDR": ":9091", "LOG_LEVEL": "debug",
				"NATS_URL": "nats://nats.messaging:4222", "NATS_CREDS": "/etc/enforcement/nats/user.creds", "GOMEMLIMIT": "400MiB"}
			if name != "policy-watcher" {
				want["STREAM_REPLICAS"] = "3"
			}
			maps.Copy(want, wantEnv[name].custom)
			if !maps.Equal(env, want) {
				t.Errorf("env\n got %v\nwant %v", env, want)
			}
			// The existing Secret's key is mounted where NATS_CREDS points.
			if len(find(objs, "Secret", "")) != 0 {
				t.Error("chart created a NATS Secret although nats.existingSecret is set")
			}
			mounted := false
			for _, v := range pod.Volumes {
				if v.Secret != nil && v.Secret.SecretName == "nats-user" && len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "user.creds" {
					for _, m := range c.VolumeMounts {
						mounted = mounted || (m.Name == v.Name && m.MountPath == "/etc/enforcement/nats" && m.ReadOnly)
					}
				}
			}
			if !mounted {
				t.Errorf("NATS credentials not mounted read-only from Secret nats-user: volumes %v mounts %v", pod.Volumes, c.VolumeMounts)
			}
			if pod.ServiceAccountName != name+"-sa" || pod.PriorityClassName != "system-cluster-critical" ||
				len(pod.ImagePullSecrets) != 1 || len(pod.Tolerations) != 1 || pod.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("pod spec does not carry the values: %+v", pod)
			}
			if len(c.EnvFrom) != 1 || c.Resources.Limits.Cpu().String() != "1" {
				t.Errorf("envFrom %v resources %v", c.EnvFrom, c.Resources)
			}
			if dep.Spec.Template.Labels["tier"] != "control" || dep.Spec.Template.Annotations["example.com/scrape"] != "true" {
				t.Errorf("pod labels %v annotations %v", dep.Spec.Template.Labels, dep.Spec.Template.Annotations)
			}
			// The ServiceMonitor scrapes the Service's metrics port.
			sm := one(t, objs, "ServiceMonitor")
			svc := one(t, objs, "Service")
			sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			for k, v := range sel {
				if svc.GetLabels()[k] != v {
					t.Errorf("ServiceMonitor selects %s=%s, Service has %v", k, v, svc.GetLabels())
				}
			}
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "15s" {
				t.Errorf("ServiceMonitor endpoints %v", eps)
			}
			if sm.GetLabels()["release"] != "prometheus" {
				t.Errorf("ServiceMonitor labels %v", sm.GetLabels())
			}
		})
	}
}

// TestNATSCredentialsFromValues: credentials given as a value land in a Secret the chart
// creates, are mounted at NATS_CREDS, and a change of them rolls the pods (checksum).
func TestNATSCredentialsFromValues(t *testing.T) {
	for _, name := range serviceCharts {
		t.Run(name, func(t *testing.T) {
			render := func(creds string) []*unstructured.Unstructured {
				return mustRender(t, name, defaultRelease, map[string]any{"nats": map[string]any{"url": "nats://n:4222", "credentials": creds}})
			}
			objs := render("-----BEGIN NATS USER JWT-----\nabc\n")
			sec := one(t, objs, "Secret")
			data, _, _ := unstructured.NestedStringMap(sec.Object, "data")
			if data["nats.creds"] != "LS0tLS1CRUdJTiBOQVRTIFVTRVIgSldULS0tLS0KYWJjCg==" {
				t.Errorf("Secret data %v", data)
			}
			dep := deployment(t, objs)
			if got := envMap(t, dep.Spec.Template.Spec.Containers[0])["NATS_CREDS"]; got != "/etc/enforcement/nats/nats.creds" {
				t.Errorf("NATS_CREDS %q", got)
			}
			found := false
			for _, v := range dep.Spec.Template.Spec.Volumes {
				found = found || (v.Secret != nil && v.Secret.SecretName == sec.GetName())
			}
			if !found {
				t.Errorf("Secret %s not mounted", sec.GetName())
			}
			other := deployment(t, render("other"))
			if dep.Spec.Template.Annotations["checksum/nats-credentials"] == other.Spec.Template.Annotations["checksum/nats-credentials"] {
				t.Error("pod template does not change with the credentials")
			}
		})
	}
}

// TestNATSUserFromValues: nats.user sets NATS_USER, and NATS_PASSWORD is read from a Secret:
// the chart's own (from nats.password; the pods roll when it changes) or an existing one. A
// user without a password, a password without a user, and a user next to a credentials file
// are refused at render time.
func TestNATSUserFromValues(t *testing.T) {
	for _, name := range serviceCharts {
		t.Run(name, func(t *testing.T) {
			natsValues := func(kv ...string) map[string]any {
				n := map[string]any{"url": "nats://n:4222"}
				for i := 0; i < len(kv); i += 2 {
					n[kv[i]] = kv[i+1]
				}
				return map[string]any{"nats": n}
			}
			passwordFrom := func(dep *appsv1.Deployment) (user string, ref *corev1.SecretKeySelector) {
				for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
					switch {
					case e.Name == "NATS_USER":
						user = e.Value
					case e.Name == "NATS_PASSWORD" && e.ValueFrom != nil:
						ref = e.ValueFrom.SecretKeyRef
					case e.Name == "NATS_PASSWORD":
						t.Errorf("NATS_PASSWORD as a plain value %q", e.Value)
					}
				}
				return user, ref
			}

			objs := mustRender(t, name, defaultRelease, natsValues("user", name, "password", "s3cret"))
			sec := one(t, objs, "Secret")
			data, _, _ := unstructured.NestedStringMap(sec.Object, "data")
			if data["password"] != "czNjcmV0" || len(data) != 1 {
				t.Errorf("Secret data %v, want the password alone", data)
			}
			dep := deployment(t, objs)
			if user, ref := passwordFrom(dep); user != name || ref == nil || ref.Name != sec.GetName() || ref.Key != "password" {
				t.Errorf("NATS_USER %q, NATS_PASSWORD from %+v; want %s and Secret %s key password", user, ref, name, sec.GetName())
			}
			if _, ok := envMap(t, dep.Spec.Template.Spec.Containers[0])["NATS_CREDS"]; ok {
				t.Error("NATS_CREDS set without a credentials file")
			}
			other := deployment(t, mustRender(t, name, defaultRelease, natsValues("user", name, "password", "other")))
			if dep.Spec.Template.Annotations["checksum/nats-password"] == other.Spec.Template.Annotations["checksum/nats-password"] {
				t.Error("pod template does not change with the password")
			}

			objs = mustRender(t, name, defaultRelease, natsValues("user", name, "passwordSecret", "nats-users", "passwordSecretKey", name))
			if got := find(objs, "Secret", ""); len(got) != 0 {
				t.Error("chart created a Secret although nats.passwordSecret is set")
			}
			if user, ref := passwordFrom(deployment(t, objs)); user != name || ref == nil || ref.Name != "nats-users" || ref.Key != name {
				t.Errorf("NATS_USER %q, NATS_PASSWORD from %+v; want Secret nats-users key %s", user, ref, name)
			}

			for _, bad := range []struct {
				vals map[string]any
				want string
			}{
				{natsValues("user", name), "set nats.passwordSecret (an existing Secret) or nats.password"},
				{natsValues("password", "s3cret"), "set nats.user as well"},
				{natsValues("user", name, "password", "s3cret", "existingSecret", "creds"), "use one"},
			} {
				if _, err := render(loadChart(t, name), defaultRelease, bad.vals); err == nil || !strings.Contains(err.Error(), bad.want) {
					t.Errorf("render with %v: %v, want an error saying %q", bad.vals, err, bad.want)
				}
			}
		})
	}
}

// hubCharts are the charts of the hub services: two replicas with leader election by default.
var hubCharts = []string{"source-scanner", "rule-engine", "argo-syncer", "trigger-dispatcher"}

// TestReplicasWithLeaderElection: the hub charts run two replicas with leader election by
// default (LEADER_ELECTION, the Lease Role in the Lease namespace, RollingUpdate) and a
// PodDisruptionBudget that keeps one; they refuse more than one replica, or a rolling update,
// without leader election, and render no PDB for a single replica (it would block drains).
func TestReplicasWithLeaderElection(t *testing.T) {
	for _, name := range hubCharts {
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, name, defaultRelease, nil)
			dep := deployment(t, objs)
			env := envMap(t, dep.Spec.Template.Spec.Containers[0])
			if *dep.Spec.Replicas != 2 || dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType ||
				env["LEADER_ELECTION"] != "true" || env["LEADER_ELECTION_NAMESPACE"] != defaultRelease.namespace {
				t.Errorf("defaults: replicas %d, strategy %q, LEADER_ELECTION=%q, LEADER_ELECTION_NAMESPACE=%q",
					*dep.Spec.Replicas, dep.Spec.Strategy.Type, env["LEADER_ELECTION"], env["LEADER_ELECTION_NAMESPACE"])
			}
			checkPDB(t, objs, dep, "1")
			if role := leaseRole(objs); role == nil || role.GetNamespace() != defaultRelease.namespace {
				t.Errorf("want the Lease Role in %s, have %v", defaultRelease.namespace, role)
			}

			off := map[string]any{"enabled": false}
			_, err := render(loadChart(t, name), defaultRelease, map[string]any{"leaderElection": off, "strategy": map[string]any{"type": "Recreate"}})
			if err == nil || !strings.Contains(err.Error(), "needs leaderElection.enabled") {
				t.Errorf("two replicas without leader election: err %v, want a refusal", err)
			}
			_, err = render(loadChart(t, name), defaultRelease, map[string]any{"leaderElection": off, "replicaCount": 1})
			if err == nil || !strings.Contains(err.Error(), "use {type: Recreate}") {
				t.Errorf("a rolling update without leader election: err %v, want a refusal", err)
			}
			single := mustRender(t, name, defaultRelease, map[string]any{"leaderElection": off, "replicaCount": 1, "strategy": map[string]any{"type": "Recreate"}})
			if env := envMap(t, deployment(t, single).Spec.Template.Spec.Containers[0]); env["LEADER_ELECTION"] != "" || env["LEADER_ELECTION_NAMESPACE"] != "" {
				t.Errorf("leader election off: LEADER_ELECTION=%q LEADER_ELECTION_NAMESPACE=%q", env["LEADER_ELECTION"], env["LEADER_ELECTION_NAMESPACE"])
			}
			if len(find(single, "PodDisruptionBudget", "")) != 0 || leaseRole(single) != nil {
				t.Error("one replica without leader election: want no PodDisruptionBudget and no Lease Role")
			}
		})
	}
	t.Run("policy-watcher", func(t *testing.T) {
		if objs := mustRender(t, "policy-watcher", defaultRelease, nil); len(find(objs, "PodDisruptionBudget", "")) != 0 {
			t.Error("one replica per managed cluster: want no PodDisruptionBudget")
		}
		objs := mustRender(t, "policy-watcher", defaultRelease, map[string]any{"replicaCount": 2})
		checkPDB(t, objs, deployment(t, objs), "1")
	})
	t.Run("custom Lease namespace and PDB", func(t *testing.T) {
		objs := mustRender(t, "rule-engine", defaultRelease, customValues("rule-engine"))
		checkPDB(t, objs, deployment(t, objs), "50%")
		if role := leaseRole(objs); role == nil || role.GetNamespace() != "enf-leases" {
			t.Errorf("want the Lease Role in enf-leases, have %v", role)
		}
	})
}

// checkPDB checks the release has one PodDisruptionBudget selecting exactly the Deployment's
// pods with minAvailable want.
func checkPDB(t *testing.T, objs []*unstructured.Unstructured, dep *appsv1.Deployment, want string) {
	t.Helper()
	pdbs := find(objs, "PodDisruptionBudget", "")
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(pdbs))
	}
	var pdb policyv1.PodDisruptionBudget
	fromUnstructured(t, pdbs[0], &pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != want {
		t.Errorf("PodDisruptionBudget minAvailable %v, want %s", pdb.Spec.MinAvailable, want)
	}
	if pdb.Spec.Selector == nil || !maps.Equal(pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget selects %v, the Deployment %v", pdb.Spec.Selector, dep.Spec.Selector.MatchLabels)
	}
}

// leaseRole is the release's Role granting the Lease verbs, or nil.
func leaseRole(objs []*unstructured.Unstructured) *unstructured.Unstructured {
	for _, r := range find(objs, "Role", "") {
		if strings.HasSuffix(r.GetName(), "-leader-election") {
			return r
		}
	}
	return nil
}

// TestChartEnvIsReadByService guards against typos and renamed variables: every variable a
// chart sets must be named in its service's non-test Go source, or be one pkg/service reads for
// every service. The reverse (a variable the service reads but the chart has no value for) is
// only logged: extraEnv covers it, and services add variables while the charts follow.
func TestChartEnvIsReadByService(t *testing.T) {
	common := []string{"NATS_URL", "NATS_CREDS", "NATS_USER", "NATS_PASSWORD", "METRICS_ADDR", "HEALTH_ADDR", "LOG_LEVEL", "SHUTDOWN_TIMEOUT",
		"STREAM_REPLICAS", "STREAM_MAX_BYTES", "KUBECONFIG"}
	// pkg/service reads these for the services that call service.LoadLeaderElection.
	leaderElection := []string{"LEADER_ELECTION", "LEADER_ELECTION_NAMESPACE", "LEADER_ELECTION_LEASE_DURATION",
		"LEADER_ELECTION_RENEW_DEADLINE", "LEADER_ELECTION_RETRY_PERIOD"}
	for _, name := range serviceCharts {
		t.Run(name, func(t *testing.T) {
			named, read := serviceEnv(t, filepath.Join("..", "..", "services", name))
			if len(named) == 0 {
				t.Skipf("no Go source of %s found", name)
			}
			if named[loadLeaderElection] {
				for _, v := range leaderElection {
					named[v] = true
				}
			}
			set := envMap(t, deployment(t, mustRender(t, name, defaultRelease, customValues(name))).Spec.Template.Spec.Containers[0])
			delete(set, "GOMEMLIMIT") // extraEnv of the custom values
			for v := range set {
				if !named[v] && !slices.Contains(common, v) {
					t.Errorf("chart sets %s, which %s does not read", v, name)
				}
			}
			for v := range read {
				if _, ok := set[v]; !ok && !slices.Contains(common, v) {
					t.Logf("%s reads %s, which the chart has no value for (use extraEnv)", name, v)
				}
			}
		})
	}
}

// loadLeaderElection marks, in serviceEnv's named, a service that calls
// service.LoadLeaderElection.
const loadLeaderElection = "service.LoadLeaderElection"

var (
	// upperLiteralRE matches a Go string literal that could be a variable name.
	upperLiteralRE = regexp.MustCompile(`"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"`)
	// envReadRE matches a name passed to getenv or a config parser:
	// getenv("X"), service.Duration(getenv, "X", ...), duration(&c.F, "X", ...).
	envReadRE = regexp.MustCompile(`(?:getenv\(|getenv, |\(&[A-Za-z.]+, )"([A-Z][A-Z0-9_]+)"`)
)

// serviceEnv scans the Go files under dir (tests excluded). named holds every upper-case string
// literal with an underscore (a superset of the variables read); read holds the names seen in
// a recognised read.
func serviceEnv(t *testing.T, dir string) (named, read map[string]bool) {
	t.Helper()
	named, read = map[string]bool{}, map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "service.LoadLeaderElection(") {
			named[loadLeaderElection] = true
		}
		for _, m := range upperLiteralRE.FindAllStringSubmatch(string(data), -1) {
			named[m[1]] = true
		}
		for _, m := range envReadRE.FindAllStringSubmatch(string(data), -1) {
			read[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s: %v", dir, err)
	}
	return named, read
}

// checkCommon checks what every service chart promises whatever the values: standard labels on
// every object, the restricted security context, probes on the health port, and a Service
// whose ports and selector reach the pods.
func checkCommon(t *testing.T, chartName string, objs []*unstructured.Unstructured, version string) {
	t.Helper()
	for _, o := range objs {
		l := o.GetLabels()
		for k, want := range map[string]string{
			"app.kubernetes.io/name": chartName, "app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/version": version,
			"app.kubernetes.io/part-of": "enforcement", "app.kubernetes.io/component": chartName,
		} {
			if l[k] != want {
				t.Errorf("%s %s: label %s=%q, want %q", o.GetKind(), o.GetName(), k, l[k], want)
			}
		}
		if l["app.kubernetes.io/instance"] == "" || !strings.HasPrefix(l["helm.sh/chart"], chartName+"-") {
			t.Errorf("%s %s: labels %v", o.GetKind(), o.GetName(), l)
		}
	}
	dep := deployment(t, objs)
	pod := dep.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext %+v: want the restricted profile", sc)
	}
	for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %+v: want GET %s on port health", probe, want)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	env := envMap(t, c)
	if env["METRICS_ADDR"] != fmt.Sprintf(":%d", ports["metrics"]) || env["HEALTH_ADDR"] != fmt.Sprintf(":%d", ports["health"]) {
		t.Errorf("ports %v do not match METRICS_ADDR %q HEALTH_ADDR %q", ports, env["METRICS_ADDR"], env["HEALTH_ADDR"])
	}
	svc := one(t, objs, "Service")
	var s corev1.Service
	fromUnstructured(t, svc, &s)
	for _, p := range s.Spec.Ports {
		if p.TargetPort.String() != p.Name || ports[p.Name] == 0 {
			t.Errorf("Service port %+v does not reach a container port (%v)", p, ports)
		}
	}
	for k, v := range s.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v || dep.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("Service selects %s=%s, which the pods or the Deployment selector lack", k, v)
		}
	}
}

// deployment decodes the only Deployment.
func deployment(t testing.TB, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	fromUnstructured(t, one(t, objs, "Deployment"), &d)
	return &d
}

// fromUnstructured converts u into a typed object, failing on unknown fields.
func fromUnstructured(t testing.TB, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// envMap returns the container's plain environment values; a duplicate name is an error.
func envMap(t testing.TB, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	return env
}

func valueInt(v any, def int) int {
	if n, ok := v.(int); ok {
		return n
	}
	return def
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaRefusesMistakes: values.schema.json makes Helm refuse a misspelt value (which would
// otherwise be ignored silently), a value of the wrong type and a negative replica count.
func TestSchemaRefusesMistakes(t *testing.T) {
	for _, name := range serviceCharts {
		ch := loadChart(t, name)
		for _, vals := range []map[string]any{
			{"replicas": 1},
			{"config": map[string]any{"scanIntervall": "1m"}},
			{"nats": map[string]any{"existingSecret": true}},
			{"serviceMonitor": map[string]any{"enabled": "yes"}},
			{"ports": map[string]any{"metrics": 70000}},
			{"replicaCount": -1},
		} {
			if _, err := render(ch, defaultRelease, vals); err == nil || !strings.Contains(err.Error(), "schema") {
				t.Errorf("%s with %v: %v, want a schema error", name, vals, err)
			}
		}
	}
}
