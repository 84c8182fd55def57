package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/enforcement-io/enforcement/pkg/service"
)

// Config is argo-syncer's configuration, read from the environment once at start.
type Config struct {
	// OperatorNamespace (OPERATOR_NAMESPACE, default "enforcement") is where source Secrets live
	// when an intent's source reference names no namespace.
	OperatorNamespace string
	// ArgoCDNamespace (ARGOCD_NAMESPACE, default "argocd") receives cluster Secrets, AppProjects
	// and Applications.
	ArgoCDNamespace string
	// Concurrency (SYNC_CONCURRENCY) bounds how many intents are handled at once:
	// defaultConcurrency, or defaultAPIConcurrency in API mode. Through the Kubernetes API, how
	// many of their writes are in flight is pkg/service's adaptive write window, up to this.
	Concurrency int
	// KubeQPS and KubeBurst (KUBE_QPS, KUBE_BURST) are an optional client-side rate limit towards
	// the API server. Unset (0), there is none: the API server's Priority and Fairness paces the
	// writes, client-go honours its 429s and the write window narrows at them (pkg/service's
	// serverPacedKube). Set, they cap the rate, for an API server without Priority and Fairness;
	// KUBE_BURST defaults to twice KUBE_QPS.
	KubeQPS   float32
	KubeBurst int
	// ProjectSourceRepos (PROJECT_SOURCE_REPOS, default "rules") is what an AppProject allows as
	// sources: "rules" lists the repositories of the rules that target the cluster, "*" allows any.
	ProjectSourceRepos string
	// ProjectClusterResources (PROJECT_CLUSTER_RESOURCES, default "all") says whether projects
	// allow cluster-scoped resources ("all") or none ("none"). Packages such as monitoring agents
	// need ClusterRoles and CRDs, hence the default.
	ProjectClusterResources string
	// SourceSecretTTL (SOURCE_SECRET_TTL, default 30s) is how long credentials read from a source
	// Secret are reused, so that registering 1,000 clusters of one source reads the Secret once.
	SourceSecretTTL time.Duration
	// ResyncInterval (RESYNC_INTERVAL, default 10m) is how often the desired state of the last
	// decisions is re-asserted: owned objects deleted or edited by hand, or lost to an outage
	// longer than the retries, are put back (resync.go).
	ResyncInterval time.Duration
	// LeaderElection (LEADER_ELECTION and its namespace and timings, pkg/service) lets two
	// replicas run: only the one holding the Lease LeaseName consumes intents and writes.
	LeaderElection service.LeaderElection
	// ArgoAPI (ARGO_URL and the other ARGO_* variables) switches API mode on: clusters,
	// AppProjects and Applications go through Argo CD's API server instead of the Kubernetes API
	// (argocdapi.go).
	ArgoAPI ArgoAPIConfig
}

// LeaseName is the Lease the syncer's replicas compete for with LEADER_ELECTION.
const LeaseName = "argo-syncer.enforcement.globo.com"

// Values of PROJECT_SOURCE_REPOS and PROJECT_CLUSTER_RESOURCES.
const (
	SourceReposRules = "rules"
	SourceReposAny   = "*"
	ClusterResAll    = "all"
	ClusterResNone   = "none"
)

// The default SYNC_CONCURRENCY. Each handler spends most of its time waiting for a round trip,
// so through the Kubernetes API the default offers enough writes for the API server to batch
// them (docs/performance.md), and the write window keeps in flight only as many as the server
// serves without 429s. argocd-server has no Priority and Fairness and answers no 429 to adapt
// to: API mode keeps the lower default.
const (
	defaultConcurrency    = 128
	defaultAPIConcurrency = 16
)

// LoadConfig reads and validates the configuration. Errors name the variable.
func LoadConfig(getenv service.Getenv) (Config, error) {
	c := Config{
		OperatorNamespace:       service.String(getenv, "OPERATOR_NAMESPACE", service.DefaultOperatorNamespace),
		ArgoCDNamespace:         service.String(getenv, "ARGOCD_NAMESPACE", service.DefaultArgoCDNamespace),
		ProjectSourceRepos:      service.String(getenv, "PROJECT_SOURCE_REPOS", SourceReposRules),
		ProjectClusterResources: service.String(getenv, "PROJECT_CLUSTER_RESOURCES", ClusterResAll),
	}
	var errs []error
	var err error
	if c.ArgoAPI, err = loadArgoAPI(getenv); err != nil {
		errs = append(errs, err)
	}
	concurrency := defaultConcurrency
	if c.ArgoAPI.Enabled() {
		concurrency = defaultAPIConcurrency
	}
	if c.Concurrency, err = service.PositiveInt(getenv, "SYNC_CONCURRENCY", concurrency); err != nil {
		errs = append(errs, err)
	}
	qps, err := service.PositiveInt(getenv, "KUBE_QPS", 0)
	if err != nil {
		errs = append(errs, err)
	}
	c.KubeQPS = float32(qps)
	if c.KubeBurst, err = service.PositiveInt(getenv, "KUBE_BURST", 2*qps); err != nil {
		errs = append(errs, err)
	} else if c.KubeBurst > 0 && qps == 0 {
		errs = append(errs, errors.New("KUBE_BURST is set without KUBE_QPS: set both for a client-side rate limit, or neither to let the API server pace the writes"))
	}
	if c.SourceSecretTTL, err = service.Duration(getenv, "SOURCE_SECRET_TTL", 30*time.Second); err != nil {
		errs = append(errs, err)
	}
	if c.ResyncInterval, err = service.Duration(getenv, "RESYNC_INTERVAL", 10*time.Minute); err != nil {
		errs = append(errs, err)
	} else if c.ResyncInterval == 0 {
		errs = append(errs, errors.New(`RESYNC_INTERVAL="0s": must be greater than 0`))
	}
	if c.LeaderElection, err = service.LoadLeaderElection(getenv, c.OperatorNamespace); err != nil {
		errs = append(errs, err)
	}
	if c.ProjectSourceRepos != SourceReposRules && c.ProjectSourceRepos != SourceReposAny {
		errs = append(errs, fmt.Errorf("PROJECT_SOURCE_REPOS=%q: want %q or %q", c.ProjectSourceRepos, SourceReposRules, SourceReposAny))
	}
	if c.ProjectClusterResources != ClusterResAll && c.ProjectClusterResources != ClusterResNone {
		errs = append(errs, fmt.Errorf("PROJECT_CLUSTER_RESOURCES=%q: want %q or %q", c.ProjectClusterResources, ClusterResAll, ClusterResNone))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// loadArgoAPI reads the ARGO_* variables of API mode; all unset is the declarative mode.
func loadArgoAPI(getenv service.Getenv) (ArgoAPIConfig, error) {
	c := ArgoAPIConfig{
		URL:             getenv("ARGO_URL"),
		Username:        getenv("ARGO_USERNAME"),
		Password:        getenv("ARGO_PASSWORD"),
		Token:           getenv("ARGO_TOKEN"),
		ServerCRT:       getenv("ARGO_SERVER_CRT"),
		GRPCWebRootPath: getenv("ARGO_GRPC_WEB_ROOT_PATH"),
	}
	var errs []error
	var err error
	if c.Insecure, err = service.Bool(getenv, "ARGO_INSECURE", false); err != nil {
		errs = append(errs, err)
	}
	if c.GRPCWeb, err = service.Bool(getenv, "ARGO_GRPC_WEB", false); err != nil {
		errs = append(errs, err)
	}
	if c.PollInterval, err = service.Duration(getenv, "ARGO_POLL_INTERVAL", 30*time.Second); err != nil {
		errs = append(errs, err)
	} else if c.PollInterval < time.Second {
		errs = append(errs, fmt.Errorf("ARGO_POLL_INTERVAL=%q: must be at least 1s", c.PollInterval))
	}
	login := c.Username != "" || c.Password != ""
	switch {
	case c.URL == "" && (login || c.Token != ""):
		errs = append(errs, errors.New("ARGO_USERNAME, ARGO_PASSWORD or ARGO_TOKEN is set without ARGO_URL: set ARGO_URL to use Argo CD's API, or unset them to write through the Kubernetes API"))
	case c.URL == "":
	case login && c.Token != "":
		errs = append(errs, errors.New("ARGO_TOKEN and ARGO_USERNAME/ARGO_PASSWORD are both set: use one of them"))
	case login && (c.Username == "" || c.Password == ""):
		errs = append(errs, errors.New("ARGO_USERNAME and ARGO_PASSWORD go together: one of them is empty"))
	case !login && c.Token == "":
		errs = append(errs, errors.New("ARGO_URL is set without credentials: set ARGO_USERNAME and ARGO_PASSWORD, or ARGO_TOKEN"))
	}
	if c.URL != "" {
		if _, err := c.clientOptions(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ServerCRT != "" {
		if _, err := os.Stat(c.ServerCRT); err != nil {
			errs = append(errs, fmt.Errorf("ARGO_SERVER_CRT=%q: %w", c.ServerCRT, err))
		}
	}
	return c, errors.Join(errs...)
}
