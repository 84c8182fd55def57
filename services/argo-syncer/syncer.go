package main

// The Syncer carries out intents: it registers a cluster (Secret), keeps its AppProject and
// writes or removes its Applications, through the Kubernetes API of the Argo CD namespace.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	argoclient "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned"
	argoinformers "github.com/argoproj/argo-cd/v2/pkg/client/informers/externalversions/application/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coretyped "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/client-go/util/workqueue"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Index names of the informers.
const (
	indexCluster = "cluster" // Applications by cluster_name label
	indexProject = "project" // foreign Applications by spec.project
	// indexTenantCluster indexes the grants' AppProjects (RenderTenantProject) by cluster.
	indexTenantCluster = "tenant-cluster"
	indexServer        = "server" // cluster Secrets by data.server
	indexName          = "name"   // cluster Secrets by data.name
)

// Failure reasons published in InstallFailed.
const (
	ReasonRejected      = "Rejected"          // the API server rejected an object (permanent)
	ReasonNotOwned      = "NotOwned"          // an object of that name belongs to someone else (permanent)
	ReasonSecretInvalid = "SourceSecretError" // the source (or OCM per-cluster) Secret is missing or unusable
	// ReasonRegistrationInvalid: the intent's registration hints (EKS/GKE) cannot build a cluster
	// config. Permanent: a redelivery carries the same hints, so a retry cannot succeed.
	ReasonRegistrationInvalid = "RegistrationInvalid"
	ReasonAPIError            = "APIError" // any other API error (retried)
	ReasonTerminating         = "ApplicationTerminating"
	// ReasonNameConflict: the cluster's name is taken by another cluster (another provider
	// identity) whose cluster Secret, AppProject or Application carries it. Permanent.
	ReasonNameConflict = "NameConflict"
)

// failure is an install error with the reason to publish. Permanent failures are not retried.
type failure struct {
	reason    string
	permanent bool
	err       error
}

func (f *failure) Error() string { return f.reason + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// classify turns an API error into a failure: a rejection (invalid, bad request, forbidden by
// admission) is permanent and keeps the server's message.
func classify(err error, what string) error {
	var f *failure
	if errors.As(err, &f) {
		return err
	}
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return &failure{reason: ReasonRejected, permanent: true, err: fmt.Errorf("%s: %w", what, err)}
	}
	return &failure{reason: ReasonAPIError, err: fmt.Errorf("%s: %w", what, err)}
}

// Syncer writes intents into Argo CD objects. It is safe for concurrent use; intents of one
// cluster are serialised.
type Syncer struct {
	ns      string
	opNS    string
	project ProjectSettings
	kube    kubernetes.Interface
	argo    argoclient.Interface
	// clusterSecrets writes cluster Secrets: the Kubernetes API's, or Argo CD's clusters in API
	// mode (argocdapi_objects.go).
	clusterSecrets coretyped.SecretInterface
	// apiMode: Argo CD's API keys clusters by URL, so moving one re-registers it with its config.
	apiMode  bool
	logger   *slog.Logger
	metrics  *Metrics
	apps     *view[*cachedApplication]
	projects *view[*cachedProject]
	secrets  *view[*cachedSecret]
	// appsREST is the REST client of Argo CD's API group, through which Applications are read
	// straight into their projection (appdecode.go); nil in API mode.
	appsREST rest.Interface
	creds    *credentialCache
	clusters clusterLocks
	// repos are the repositories that installs waiting for their cluster's objects want its
	// AppProject to allow.
	repos repoQueue
	// covered and coveredProjects: the Applications and AppProjects whose spec holds more than
	// argo-syncer renders (drift.go).
	covered, coveredProjects coveredSpecs
	// quiet: the Applications written for their pair's first decision, whose first report,
	// empty, the health reporter does not send (health.go).
	quiet quietStarts
	// pending holds clusters to unregister once their terminating Applications are gone.
	pending workqueue.TypedRateLimitingInterface[string]
	synced  []cache.InformerSynced
}

// SyncerOptions configure NewSyncer.
type SyncerOptions struct {
	ArgoCDNamespace   string
	OperatorNamespace string
	Project           ProjectSettings
	SourceSecretTTL   time.Duration
	Logger            *slog.Logger
	Metrics           *Metrics
	// ClusterSecrets, when set, replaces the Kubernetes API's Secrets of ArgoCDNamespace for the
	// cluster Secrets: API mode sets Argo CD's clusters (APIMode).
	ClusterSecrets coretyped.SecretInterface
	APIMode        bool
}

// NewSyncer builds a Syncer and its informers; call Run to start them.
func NewSyncer(kube kubernetes.Interface, argo argoclient.Interface, o SyncerOptions) *Syncer {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Syncer{
		ns: o.ArgoCDNamespace, opNS: o.OperatorNamespace, project: o.Project,
		kube: kube, argo: argo, logger: o.Logger, metrics: o.Metrics,
		clusterSecrets: o.ClusterSecrets, apiMode: o.APIMode,
		creds: &credentialCache{kube: kube, ttl: o.SourceSecretTTL, entries: map[string]credentialEntry{}},
		pending: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](
			100*time.Millisecond, 30*time.Second)),
	}
	var appInformer cache.SharedIndexInformer
	if s.apiMode {
		appInformer = argoinformers.NewApplicationInformer(argo, s.ns, 0, applicationIndexers())
	} else {
		s.appsREST = argo.ArgoprojV1alpha1().RESTClient()
		appInformer = cache.NewSharedIndexInformer(applicationListWatch{client: s.appsREST, ns: s.ns}, &cachedApplication{}, 0,
			applicationIndexers())
	}
	projectInformer := argoinformers.NewAppProjectInformer(argo, s.ns, 0, projectIndexers())
	if s.clusterSecrets == nil {
		s.clusterSecrets = kube.CoreV1().Secrets(s.ns)
	}
	clusterOnly := LabelSecretType + "=" + SecretTypeCluster
	secretInformer := cache.NewSharedIndexInformer(&cache.ListWatch{
		// As client-go's own informers (no context before v0.32): a watch ends with its Stop.
		ListFunc: func(lo metav1.ListOptions) (runtime.Object, error) {
			lo.LabelSelector = clusterOnly
			return s.clusterSecrets.List(context.Background(), lo)
		},
		WatchFunc: func(lo metav1.ListOptions) (watch.Interface, error) {
			lo.LabelSelector = clusterOnly
			return s.clusterSecrets.Watch(context.Background(), lo)
		},
	}, &corev1.Secret{}, 0, cache.Indexers{})
	s.apps = newView(s.ns, appInformer, applicationKeys())
	s.projects = newView[*cachedProject](s.ns, projectInformer, nil)
	s.secrets = newView(s.ns, secretInformer, secretKeys())
	s.projects.onDelete = func(p *cachedProject) { s.coveredProjects.forget(p.Name) }
	s.apps.onDelete = func(app *cachedApplication) {
		s.covered.forget(app.Name)
		if c := app.Annotations.Get(AnnotationCluster); c != "" && owned(app) {
			s.pending.Add(c)
			return
		}
		// A foreign Application that held up an unregistration (see unregister) is gone.
		if p, ok, _ := s.projects.get(app.Project.String()); ok && owned(p) && p.Annotations.Get(AnnotationUnregister) != "" {
			s.pending.Add(p.Annotations.Get(AnnotationCluster))
		}
	}
	s.synced = []cache.InformerSynced{appInformer.HasSynced, projectInformer.HasSynced, secretInformer.HasSynced}
	return s
}

// applicationIndexers index the Applications Enforcement does not manage by project:
// foreignApplications is the index's one reader, and an entry for each of Enforcement's own
// Applications would cost a set of ten names a cluster, about 400 bytes (BenchmarkCachedCluster).
func applicationIndexers() cache.Indexers {
	return cache.Indexers{
		indexProject: func(obj any) ([]string, error) {
			app, ok := obj.(*cachedApplication)
			if !ok || app.Project.String() == "" || owned(app) {
				return nil, nil
			}
			return []string{app.Project.String()}, nil
		},
	}
}

// applicationKeys index the Applications by cluster (their cluster_name label) in a key index
// of the view (keyIndex): a list of a cluster's names where the informer would keep a set.
func applicationKeys() map[string]func(*cachedApplication) string {
	return map[string]func(*cachedApplication) string{
		indexCluster: func(app *cachedApplication) string { return app.Labels.Get(LabelCluster) },
	}
}

// projectIndexers index the grants' AppProjects by cluster.
func projectIndexers() cache.Indexers {
	return cache.Indexers{
		indexTenantCluster: func(obj any) ([]string, error) {
			p, ok := obj.(*cachedProject)
			if !ok || p.Annotations.Get(AnnotationGrant) == "" {
				return nil, nil
			}
			return []string{p.Annotations.Get(AnnotationCluster)}, nil
		},
	}
}

// secretKeys index the cluster Secrets by server and by name, as Argo CD knows clusters: each
// nearly always its own, so by key indexes (keyIndex).
func secretKeys() map[string]func(*cachedSecret) string {
	return map[string]func(*cachedSecret) string{
		indexServer: func(sec *cachedSecret) string { return sec.Server },
		indexName:   func(sec *cachedSecret) string { return sec.ClusterName },
	}
}

// Run starts the informers, waits for their caches and closes ready; then, once leading is
// closed (at once when it is nil), it queues the clusters whose unregistration was pending when
// the service last stopped and works the unregistration queue until ctx ends. A standby replica
// keeps its caches warm and writes nothing: deletions seen meanwhile wait in the queue.
func (s *Syncer) Run(ctx context.Context, ready chan<- struct{}, leading <-chan struct{}) error {
	go s.apps.informer.Run(ctx.Done())
	go s.projects.informer.Run(ctx.Done())
	go s.secrets.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return fmt.Errorf("sync Argo CD caches: %w", ctx.Err())
	}
	close(ready)
	if leading != nil {
		select {
		case <-leading:
		case <-ctx.Done():
			s.pending.ShutDown()
			return nil
		}
	}
	for _, obj := range s.projects.informer.GetIndexer().List() {
		if p, ok := obj.(*cachedProject); ok && owned(p) && p.Annotations.Get(AnnotationUnregister) != "" {
			s.pending.Add(p.Annotations.Get(AnnotationCluster))
		}
	}
	go func() { <-ctx.Done(); s.pending.ShutDown() }()
	for {
		cluster, quit := s.pending.Get()
		if quit {
			return nil
		}
		err := s.finishUnregister(ctx, cluster)
		if err != nil && ctx.Err() == nil {
			s.logger.Warn("Retrying cluster unregistration", "cluster", cluster, "error", err)
			s.pending.AddRateLimited(cluster)
		} else {
			s.pending.Forget(cluster)
		}
		s.pending.Done(cluster)
	}
}

// owned reports whether Enforcement manages the object.
func owned(o metav1.Object) bool { return labelOf(o, LabelManagedBy) == ManagedByValue }

// labelOf and annotationOf are an object's label or annotation k: of a cached projection
// (cachedApplication, cachedProject, cachedSecret) read from the list it keeps, without building
// a map.
func labelOf(o metav1.Object, k string) string {
	if m, ok := o.(interface{ kept() *cachedMeta }); ok {
		return m.kept().Labels.Get(k)
	}
	return o.GetLabels()[k]
}

func annotationOf(o metav1.Object, k string) string {
	if m, ok := o.(interface{ kept() *cachedMeta }); ok {
		return m.kept().Annotations.Get(k)
	}
	return o.GetAnnotations()[k]
}

// InstallResult says what an install did.
type InstallResult struct {
	Application string
	// Created is true when the Application did not exist before.
	Created bool
	// Waiting is true when the install waits for its beforeInstall trigger.
	Waiting bool
	// Unchanged is true when the Application was already as rendered and nothing was applied.
	Unchanged bool
	// Writes counts the write requests sent.
	Writes int
}

// Install makes the intent's Application exist as rendered, registering the cluster and writing
// its AppProject first when needed. With gate set, a new Application whose intent has a
// beforeInstall trigger is not created: the result says Waiting. Errors are *failure values.
// The intents of one cluster's other Applications are installed alongside (clusterLocks).
func (s *Syncer) Install(ctx context.Context, in *events.InstallIntent, gate bool) (InstallResult, error) {
	h, unlock := s.clusters.install(in.Cluster.Name)
	defer unlock()
	return s.install(ctx, h, in, gate, true)
}

// install is Install with the cluster held: shared by h, or exclusively (h is then the zero
// installing). With refreshCredentials set (an intent, not the resync) the cluster Secret's
// credentials follow the Secret the intent references, and an Application it creates records
// the intent (AnnotationCreatedBy).
func (s *Syncer) install(ctx context.Context, h installing, in *events.InstallIntent, gate, refreshCredentials bool) (InstallResult, error) {
	cluster := in.Cluster.Name
	// Decide from the cache (and argo-syncer's own recent writes) before writing anything: the
	// common cases, a redelivery or an unchanged render, cost no request at all.
	names := s.names(cluster, in.Enforcement.Name)
	if in.Grant != nil {
		// A rule outside OPERATOR_NAMESPACE: its Application lives in its grant's project.
		names.project, names.legacyProject = TenantProjectName(cluster, in.Grant.Name), false
	}
	desired := RenderApplication(s.ns, in, names)
	desired.seal()
	res := InstallResult{Application: desired.Metadata.Name}
	defer h.application(desired.Metadata.Name)()
	existing, exists, terminating := s.apps.get(desired.Metadata.Name)
	if terminating {
		return res, &failure{reason: ReasonTerminating, err: fmt.Errorf("application %s is being deleted; waiting until it is gone", desired.Metadata.Name)}
	}
	// Checked again in prepareCluster, with the cluster's objects held: here it is read
	// without, so that the cluster's installs queue their repositories for one project write.
	if err := s.nameConflict(in.Rule, in.Cluster, names); err != nil {
		return res, err
	}
	if exists {
		if err := mayWrite(existing, in); err != nil {
			return res, err
		}
	}
	if !exists && gate && in.Triggers != nil && in.Triggers.BeforeInstall != nil {
		res.Waiting = true
		return res, nil
	}
	writes, err := s.prepareCluster(ctx, h, in, names, refreshCredentials)
	res.Writes += writes
	if err != nil {
		return res, err
	}
	asRendered := false
	if exists && owned(existing) {
		if asRendered, err = s.applicationInSync(ctx, existing, desired); err != nil {
			return res, err
		}
	}
	if asRendered {
		res.Unchanged = true
		// Already as rendered: a redelivery or a no-op change. When this intent created it, the
		// earlier run stopped before it reported the creation (a crash, a lost acknowledgement
		// of the outcome): this run reports it.
		res.Created = refreshCredentials && existing.Annotations.Get(AnnotationCreatedBy) == in.ID()
		return res, nil
	}
	if !exists && refreshCredentials { // an intent's creation, not the resync's restore
		desired.Metadata.Annotations[AnnotationCreatedBy] = in.ID()
	}
	if exists && !owned(existing) {
		res.Writes++
		if err := s.adoptApplication(ctx, existing); err != nil {
			return res, err
		}
	}
	app, generation, writes, err := s.applyApplication(ctx, desired, !exists)
	res.Writes += writes
	if err != nil {
		return res, err
	}
	// Created is the afterInstall moment. The cache and the overlay saw no Application; the
	// generation guards against one the cache missed whose spec was changed since its creation.
	res.Created = !exists && generation <= 1
	switch {
	case res.Created:
		s.logger.Info("Created Application", "application", app.Name, "cluster", cluster, "rule", in.Rule.String())
	case !owned(existing):
		s.logger.Info("Adopted Application", "application", app.Name, "cluster", cluster, "rule", in.Rule.String(), "from", OriginOriginalOperator)
	default:
		s.logger.Info("Updated Application", "application", app.Name, "cluster", cluster, "rule", in.Rule.String())
	}
	return res, nil
}

// prepareCluster readies the cluster for the intent's Application, holding the cluster's own
// objects: no other cluster of that name holds them (nameConflict, again: another install of
// the cluster may have written them since the first check), the cluster is registered,
// a pending unregistration is called off and the AppProject allows the repository. Order
// matters for Argo CD: the cluster must be registered and the project must allow the repository
// before the Application is reconciled, or its first sync fails. The registration and the
// project do not depend on each other: a new cluster's Secret is created while its project is
// written, once its credentials are read, so that an unusable registration still writes nothing.
func (s *Syncer) prepareCluster(ctx context.Context, h installing, in *events.InstallIntent, names objectNames, refreshCredentials bool) (int, error) {
	if in.Grant == nil {
		s.repos.add(names.project, in.Cluster.Identity, in.Enforcement.Repo)
		defer s.repos.done(names.project, in.Cluster.Identity, in.Enforcement.Repo)
	}
	defer h.objects(in.Cluster.Name)()
	if err := s.nameConflict(in.Rule, in.Cluster, names); err != nil {
		return 0, err
	}
	newSecret, writes, err := s.ensureCluster(ctx, in.Cluster, names.secret, refreshCredentials)
	if err != nil {
		return writes, err
	}
	var registered chan error
	if newSecret != nil {
		registered = make(chan error, 1)
		go func() { registered <- s.createClusterSecret(ctx, newSecret) }()
	}
	w, err := s.clearUnregisterPending(ctx, in.Cluster.Name)
	writes += w
	if err == nil {
		if in.Grant != nil {
			w, err = s.ensureTenantProject(ctx, in.Cluster, names.project, in.Grant)
		} else {
			w, err = s.ensureProject(ctx, in.Cluster, names, in.Enforcement.Repo, in.ProjectRepos)
		}
		writes += w
	}
	if registered != nil {
		writes++
		if rerr := <-registered; rerr != nil {
			return writes, rerr // the registration's failure first, as when it came first
		}
	}
	return writes, err
}

// mayWrite reports, as a permanent NotOwned failure, why the intent must not write over the
// existing Application: someone else's (not the original operator's either, see adoption.go),
// another rule's, or another pair's that shares the name; nil when it may.
func mayWrite(existing *cachedApplication, in *events.InstallIntent) error {
	if !owned(existing) {
		if why := originalApplication(existing, in.Cluster.Name); why != "" {
			return &failure{reason: ReasonNotOwned, permanent: true,
				err: fmt.Errorf("application %s exists and is not managed by Enforcement (not the original operator's, so not adopted: %s)", existing.Name, why)}
		}
		return nil
	}
	if rule := existing.Annotations.Get(AnnotationRule); rule != "" && rule != in.Rule.String() {
		return &failure{reason: ReasonNotOwned, permanent: true,
			err: fmt.Errorf("application %s belongs to rule %s", existing.Name, rule)}
	}
	// "<cluster>-<enforcement>" is ambiguous: cluster "a-b" with enforcement "c" and cluster
	// "a" with enforcement "b-c" share a name. The first one keeps it.
	if !samePair(existing, in.Cluster.Name, in.Enforcement.Name) {
		return &failure{reason: ReasonNotOwned, permanent: true,
			err: fmt.Errorf("application %s belongs to cluster %s, enforcement %s", existing.Name,
				existing.Annotations.Get(AnnotationCluster), existing.Annotations.Get(AnnotationEnforcement))}
	}
	return nil
}

// applyApplication writes the rendered Application o, created when neither the cache nor the
// overlay has seen it (create), and returns it as the API server answered, with the number of
// write requests it took. API mode applies it through Argo CD (argocdapi_objects.go).
func (s *Syncer) applyApplication(ctx context.Context, o *applyObject, create bool) (app *cachedApplication, generation int64, writes int, err error) {
	if s.appsREST != nil {
		app, generation, writes, err = s.writeApplication(ctx, o, create)
	} else {
		var applied *argov1.Application
		applied, err = s.argo.ArgoprojV1alpha1().Applications(s.ns).Patch(ctx, o.Metadata.Name, types.ApplyPatchType, o.body(),
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)})
		s.metrics.write("Application", "apply", err)
		writes = 1
		if err == nil {
			app, generation = cacheApplication(applied), applied.Generation
		}
	}
	if err != nil {
		return nil, 0, writes, classify(err, "write application "+o.Metadata.Name)
	}
	s.apps.wrote(app)
	return app, generation, writes, nil
}

// writeApplication writes the rendered Application o through the Kubernetes API.
//
// A new one (create) is created by a plain create: for the API server it is about a quarter
// cheaper than an apply that creates (the benchmark's two floors), and nearly all of a burst
// of new clusters is creations. Its fields are then FieldManager's by an update, not an apply,
// and an apply leaves in place a field it no longer states that its manager holds by an
// update. Every later write is an apply; when its answer shows it may have left such a field
// (keepsMore), the update's fields are converted into the apply's (convertOwnership) and o is
// applied again, which removes them. An edit that leaves out nothing the creation wrote (nearly
// every edit: a Helm value, a revision) costs one request, as before.
//
// The creation's record (AnnotationCreatedBy) is the one field every later apply leaves out:
// it stays until an apply converts the ownership, and is not reason enough to. An adopted
// Application is never converted: what argo-syncer holds of it by an update is the adoption's
// record, which later applies keep on purpose (adoption.go).
func (s *Syncer) writeApplication(ctx context.Context, o *applyObject, create bool) (app *cachedApplication, generation int64, writes int, err error) {
	body := o.body()
	if create {
		answer, err := createApplicationJSON(ctx, s.appsREST, s.ns, body)
		s.metrics.write("Application", "create", err)
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return nil, 0, 1, err
			}
			app, generation, _, err = readAnswer(answer)
			return app, generation, 1, err
		}
		writes++ // the cache had not seen it yet: applied as any existing one
	}
	for converted := false; ; converted = true {
		answer, err := applyApplicationJSON(ctx, s.appsREST, s.ns, o.Metadata.Name, body)
		s.metrics.write("Application", "apply", err)
		writes++
		if err != nil {
			return nil, 0, writes, err
		}
		app, generation, updatedBy, err := readAnswer(answer)
		if err != nil || converted || !updatedBy || !keepsMore(&app.cachedMeta, app.SpecDigest, o) {
			return app, generation, writes, err
		}
		sent, err := s.convertOwnership(ctx, answer)
		if sent {
			writes++
		}
		if err != nil || !sent {
			return app, generation, writes, err
		}
	}
}

// keepsMore reports whether an object with metadata m and spec digest digest, as an apply of
// desired answered it, may hold a field argo-syncer wrote by its creation and desired leaves
// out: it is not adopted, and has another spec, or a label or an annotation desired has not
// (those argo-syncer writes by patches of their own aside, patchedAnnotation).
func keepsMore(m *cachedMeta, digest specDigest, desired *applyObject) bool {
	if _, adopted := m.Annotations.Lookup(AnnotationAdoptedFrom); adopted {
		return false
	}
	if digest != digestSpec(desired.Spec) {
		return true
	}
	return hasOther(m.Labels, desired.Metadata.Labels) || hasOther(m.Annotations, desired.Metadata.Annotations)
}

// hasOther reports whether have holds a key that want has not, other than a patchedAnnotation.
func hasOther(have metaStrings, want map[string]string) (other bool) {
	have.all(func(k, _ string) bool {
		_, ok := want[k]
		other = !ok && !patchedAnnotation(k)
		return !other
	})
	return other
}

// patchedAnnotation reports whether argo-syncer writes annotation k by a patch of its own, not
// by an apply, so that an apply leaving it out is meant: an Application's creation record
// (AnnotationCreatedBy) and a project's pending unregistration (AnnotationUnregister, which an
// install clears by its own patch, clearUnregisterPending).
func patchedAnnotation(k string) bool { return k == AnnotationCreatedBy || k == AnnotationUnregister }

// convertOwnership makes the fields FieldManager holds of the Application answer (the server's
// JSON of it) by an update its fields by an apply, as kubectl does when it moves an object
// from client-side to server-side apply: the update's entry of the managed fields is merged
// into the apply's. The patch replaces the resource version too, so it fails with a conflict
// if the Application changed since answer. sent is false when there was nothing to convert.
func (s *Syncer) convertOwnership(ctx context.Context, answer []byte) (sent bool, err error) {
	app := &unstructured.Unstructured{}
	if err := app.UnmarshalJSON(answer); err != nil {
		return false, fmt.Errorf("decode application: %w", err)
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(app, sets.New(FieldManager), FieldManager)
	if err != nil || patch == nil {
		return false, err
	}
	err = s.appsREST.Patch(types.JSONPatchType).Namespace(s.ns).Resource("applications").Name(app.GetName()).
		Body(patch).Do(ctx).Error()
	s.metrics.write("Application", "patch", err)
	return true, err
}

// writeProject writes the rendered AppProject o as writeApplication writes an Application: a
// new one (create) by a plain create, every later write by an apply, whose answer tells whether
// the creation's fields must first become the apply's (keepsMore) for the apply to remove what
// it leaves out. It returns the project as the API server answered and the writes sent. API
// mode has neither creates nor managed fields: there it is one apply (argocdapi_objects.go).
func (s *Syncer) writeProject(ctx context.Context, o *applyObject, create bool) (*cachedProject, int, error) {
	body, writes := o.body(), 0
	if create && s.appsREST != nil {
		created := &argov1.AppProject{}
		err := s.appsREST.Post().Namespace(s.ns).Resource("appprojects").
			VersionedParams(&metav1.CreateOptions{FieldManager: FieldManager}, metav1.ParameterCodec).
			Body(body).Do(ctx).Into(created)
		s.metrics.write("AppProject", "create", err)
		writes++
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return nil, writes, err
			}
			return cacheProject(created), writes, nil
		}
	}
	projects := s.argo.ArgoprojV1alpha1().AppProjects(s.ns)
	for converted := false; ; converted = true {
		p, err := projects.Patch(ctx, o.Metadata.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)})
		s.metrics.write("AppProject", "apply", err)
		writes++
		if err != nil {
			return nil, writes, err
		}
		c := cacheProject(p)
		if s.appsREST == nil || converted || !updatedByManager(p.ManagedFields) || !keepsMore(&c.cachedMeta, c.SpecDigest, o) {
			return c, writes, nil
		}
		patch, err := csaupgrade.UpgradeManagedFieldsPatch(p, sets.New(FieldManager), FieldManager)
		if err != nil || patch == nil {
			return c, writes, err
		}
		_, err = projects.Patch(ctx, o.Metadata.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		s.metrics.write("AppProject", "patch", err)
		writes++
		if err != nil {
			return c, writes, err
		}
	}
}

// updatedByManager reports whether FieldManager holds some of an object's fields (managed) by
// an update: a create, or a patch other than an apply.
func updatedByManager(managed []metav1.ManagedFieldsEntry) bool {
	return slices.ContainsFunc(managed, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == ""
	})
}

// ensureCluster keeps the cluster registered in Argo CD. Enforcement's cluster Secret, when
// there is one, is kept up to date in place (updateClusterSecret, whose writes it counts);
// refreshCredentials: see there. A cluster registered otherwise, by a cluster Secret of its
// name or API URL, needs nothing. Otherwise it returns the cluster Secret to create
// (createClusterSecret), with the credentials read from the source Secret the intent references
// and recorded (AnnotationCredentials); secretName is its name (names).
func (s *Syncer) ensureCluster(ctx context.Context, t events.Target, secretName string, refreshCredentials bool) (create *corev1.Secret, writes int, err error) {
	if sec, ok, _ := s.secrets.get(secretName); ok && owned(sec) {
		writes, err = s.updateClusterSecret(ctx, sec, t, refreshCredentials)
		return nil, writes, err
	}
	if s.registered(t, secretName) {
		return nil, 0, nil
	}
	cfg, err := s.clusterConfig(ctx, t)
	if err != nil {
		return nil, 0, err
	}
	sec, err := RenderClusterSecret(s.ns, t, cfg)
	if err != nil {
		return nil, 0, &failure{reason: ReasonSecretInvalid, err: err}
	}
	if from := s.credentialsFrom(t); from != "" {
		sec.Annotations[AnnotationCredentials] = from
	}
	return sec, 0, nil
}

// createClusterSecret registers a cluster with the Secret ensureCluster rendered; one another
// writer created in the meantime registers it as well.
func (s *Syncer) createClusterSecret(ctx context.Context, sec *corev1.Secret) error {
	created, err := s.clusterSecrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: FieldManager})
	s.metrics.write("Secret", "create", err)
	if apierrors.IsAlreadyExists(err) {
		return nil // registered by someone else in the meantime
	}
	if err != nil {
		return classify(err, "create cluster secret "+sec.Name)
	}
	s.secrets.wrote(cacheSecret(created))
	s.logger.Info("Registered cluster", "cluster", sec.Annotations[AnnotationCluster], "secret", created.Name)
	return nil
}

// updateClusterSecret keeps Enforcement's cluster Secret of the target's cluster: one whose API
// URL changed (the source moved the cluster) is pointed at the new URL, and one written without
// an identity is claimed by the target's, as is one of the identity a source handover replaces
// (Target.Replaces). The server moves only for the identity the Secret records or that
// identity's successor (install checked nameConflict; this is the last guard).
//
// With refreshCredentials (an install intent; the resync leaves credentials alone), the
// credentials follow the Secret the intent references: when it is not the one the cluster
// Secret records (a changed secretName, a static cluster's own Secret changed), the config is
// built again from it and written in place with the new reference (same Secret, same server).
// A cluster Secret that records no reference (written by an earlier version) gets the config
// only when it differs from what the referenced Secret gives, and the reference with it. An
// intent that references the recorded Secret reads nothing.
func (s *Syncer) updateClusterSecret(ctx context.Context, sec *cachedSecret, t events.Target, refreshCredentials bool) (int, error) {
	recorded := sec.Annotations.Get(AnnotationIdentity)
	handover := recorded != "" && t.Replaces != "" && recorded == t.Replaces && t.Identity != ""
	if recorded != "" && t.Identity != "" && recorded != t.Identity && !handover {
		return 0, conflictError("secret", sec.Name, t, recorded)
	}
	data, annotations := map[string][]byte{}, map[string]string{}
	if t.URL != "" && sec.Server != t.URL {
		data["server"] = []byte(t.URL)
	}
	if (recorded == "" || handover) && t.Identity != "" {
		annotations[AnnotationIdentity] = t.Identity
	}
	if refreshCredentials {
		config, err := s.refreshedConfig(ctx, sec, t)
		if err != nil {
			return 0, err
		}
		if config != nil {
			data["config"] = config
			annotations[AnnotationCredentials] = s.credentialsFrom(t)
		}
	}
	if s.apiMode && data["server"] != nil && data["config"] == nil {
		// Argo CD's API keys clusters by URL: the move is a new registration, which needs the
		// credentials it never returns.
		cfg, err := s.clusterConfig(ctx, t)
		if err != nil {
			return 0, err
		}
		if data["config"], err = json.Marshal(cfg); err != nil {
			return 0, &failure{reason: ReasonSecretInvalid, err: fmt.Errorf("marshal cluster config: %w", err)}
		}
	}
	patch := map[string]any{}
	if len(data) > 0 {
		patch["data"] = data
	}
	if len(annotations) > 0 {
		patch["metadata"] = map[string]any{"annotations": annotations}
	}
	if len(patch) == 0 {
		return 0, nil
	}
	body, _ := json.Marshal(patch)
	updated, err := s.clusterSecrets.Patch(ctx, sec.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
	s.metrics.write("Secret", "patch", err)
	if err != nil {
		return 1, classify(err, "update cluster secret "+sec.Name)
	}
	s.secrets.wrote(cacheSecret(updated))
	if data["server"] != nil {
		s.logger.Info("Updated cluster URL", "cluster", t.Name, "secret", sec.Name)
	}
	if data["config"] != nil {
		s.logger.Info("Refreshed cluster credentials", "cluster", t.Name, "secret", sec.Name,
			"from", annotations[AnnotationCredentials], "was", sec.Annotations.Get(AnnotationCredentials))
	}
	if handover {
		s.logger.Info("Handed over cluster Secret", "cluster", t.Name, "secret", sec.Name, "from", recorded, "to", t.Identity)
	}
	return 1, nil
}

// refreshedConfig is the cluster config to write into the cluster Secret sec because the target
// reads its credentials from another Secret than the one sec records (see updateClusterSecret);
// nil when there is nothing to refresh: the same Secret, or a kind without credentials.
func (s *Syncer) refreshedConfig(ctx context.Context, sec *cachedSecret, t events.Target) ([]byte, error) {
	from := s.credentialsFrom(t)
	was, recorded := sec.Annotations.Lookup(AnnotationCredentials)
	if from == "" || was == from {
		return nil, nil
	}
	cfg, err := s.clusterConfig(ctx, t)
	if err != nil {
		return nil, err
	}
	config, err := json.Marshal(cfg)
	if err != nil {
		return nil, &failure{reason: ReasonSecretInvalid, err: fmt.Errorf("marshal cluster config: %w", err)}
	}
	if !recorded && configDigest(config) == sec.ConfigDigest {
		return nil, nil // an earlier version's Secret, already with these credentials
	}
	return config, nil
}

// credentialsFrom is the Secret ("<namespace>/<name>") the target's credentials are read from:
// the one the intent references (default: the source kind's in OPERATOR_NAMESPACE), OCM's
// per-cluster Secret next to it; "" for EKS, GKE and AKS, registered from hints alone.
func (s *Syncer) credentialsFrom(t events.Target) string {
	ref := s.secretRef(t.Source)
	switch t.Source.Kind {
	case KindEKS, KindGKE, KindAKS, KindClusterProfile:
		return ""
	case KindOCM:
		ref.name = OCMCredentialsSecretName(t.Name)
	}
	return ref.namespace + "/" + ref.name
}

// nameConflict returns a permanent NameConflict failure when the cluster Secret, AppProject or
// Application of n (the target's cluster name; names) records a provider identity other than
// the target's: they belong to another cluster of the same name, which keeps them. Objects that
// record none (written before identities, or adopted) are claimed by the first identity that
// writes them; a target without an identity (an older producer) is not checked.
//
// A source handover is the one exception: a target whose Replaces is exactly the identity an
// object records takes it over (rule-engine moved rule's pair from that cluster of its old
// source to this one, which has the same name). The shared Secret and AppProject are taken over
// only when no Application of another rule still records the old identity: that rule still
// installs on the old cluster, so the name is really wanted by two clusters.
func (s *Syncer) nameConflict(rule events.RuleRef, t events.Target, n objectNames) error {
	if t.Identity == "" {
		return nil
	}
	ours := func(id string) bool { return id == "" || id == t.Identity || (t.Replaces != "" && id == t.Replaces) }
	if sec, ok, _ := s.secrets.get(n.secret); ok {
		if id := sec.Annotations.Get(AnnotationIdentity); !ours(id) {
			return conflictError("secret", sec.Name, t, id)
		}
	}
	if p, ok, _ := s.projects.get(n.project); ok {
		if id := p.Annotations.Get(AnnotationIdentity); !ours(id) {
			return conflictError("appproject", p.Name, t, id)
		}
	}
	if a, ok, _ := s.apps.get(n.application); n.application != "" && ok {
		if id := a.Annotations.Get(AnnotationIdentity); !ours(id) {
			return conflictError("application", a.Name, t, id)
		}
	}
	if t.Replaces == "" || t.Replaces == t.Identity {
		return nil
	}
	for _, l := range clusterLabels(t.Name) {
		for _, a := range s.apps.list(indexCluster, l) {
			if a.Annotations.Get(AnnotationIdentity) == t.Replaces && a.Annotations.Get(AnnotationRule) != rule.String() {
				return &failure{reason: ReasonNameConflict, permanent: true,
					err: fmt.Errorf("cluster name %s: rule %s hands it over from cluster %s to cluster %s, but application %s of rule %s still installs on %s; cluster %s gets nothing under that name",
						t.Name, rule, t.Replaces, t.Identity, a.Name, a.Annotations.Get(AnnotationRule), t.Replaces, t.Identity)}
			}
		}
	}
	return nil
}

// NameConflict is nameConflict for the target's objects and the Application of enforcement,
// with the cluster's lock held.
func (s *Syncer) NameConflict(rule events.RuleRef, t events.Target, enforcement string) error {
	unlock := s.clusters.lock(t.Name)
	defer unlock()
	return s.nameConflict(rule, t, s.names(t.Name, enforcement))
}

func conflictError(kind, name string, t events.Target, owner string) error {
	return &failure{reason: ReasonNameConflict, permanent: true,
		err: fmt.Errorf("cluster name %s is taken by cluster %s (its %s %s records it); cluster %s gets nothing under that name",
			t.Name, owner, kind, name, t.Identity)}
}

// clusterConfig builds the Argo CD cluster config of a target by its source kind:
//   - eks, gke, aks, clusterprofile: from the intent's registration hints alone (awsAuthConfig / execProviderConfig and
//     the CA); no Secret is read, so a source without a Secret (the SDKs' default chains) works;
//   - ocm: bearer token and CA from the cluster's own Secret "ocm-<cluster>" next to the source
//     Secrets (read each time: a cluster is registered once, so caching would only hold memory);
//   - any other (rancher, static): the source Secret the intent references, cached for the TTL.
func (s *Syncer) clusterConfig(ctx context.Context, t events.Target) (argov1.ClusterConfig, error) {
	switch t.Source.Kind {
	case KindEKS, KindGKE, KindAKS, KindClusterProfile:
		cfg, err := ClusterConfigFromHints(t.Source.Kind, t.Registration)
		if err != nil {
			return cfg, &failure{reason: ReasonRegistrationInvalid, permanent: true, err: err}
		}
		return cfg, nil
	case KindOCM:
		ref := s.secretRef(t.Source)
		ref.name = OCMCredentialsSecretName(t.Name)
		return s.creds.read(ctx, ref)
	}
	return s.creds.get(ctx, s.secretRef(t.Source))
}

// registered reports whether a cluster Secret exists for the cluster's name or API URL;
// secretName is the name of the cluster's own (names).
func (s *Syncer) registered(t events.Target, secretName string) bool {
	if _, ok, _ := s.secrets.get(secretName); ok {
		return true
	}
	if t.URL != "" && len(s.secrets.list(indexServer, t.URL)) > 0 {
		return true
	}
	return len(s.secrets.list(indexName, t.Name)) > 0
}

func (s *Syncer) secretRef(src events.SourceRef) secretRef {
	ref := secretRef{kind: src.Kind, namespace: src.SecretNamespace, name: src.SecretName}
	if ref.namespace == "" {
		ref.namespace = s.opNS
	}
	if ref.name == "" {
		ref.name = src.Kind // the original's default: a Secret named after the source kind
	}
	return ref
}

// ensureProject makes the cluster's AppProject (n.project) allow repo, the repositories also of
// the cluster's other intents of the same decision (events.InstallIntent.ProjectRepos), and the
// repositories it already allows. It writes only when something is missing.
func (s *Syncer) ensureProject(ctx context.Context, t events.Target, n objectNames, repo string, also []string) (int, error) {
	name := n.project
	existing, exists, _ := s.projects.get(name)
	writes := 0
	if exists && !owned(existing) {
		if why := originalProject(existing, t); why != "" {
			return 0, &failure{reason: ReasonNotOwned, permanent: true,
				err: fmt.Errorf("appproject %s exists and is not managed by Enforcement (not the original operator's, so not adopted: %s)", name, why)}
		}
		writes++
		if err := s.adoptProject(ctx, existing, t.Name); err != nil {
			return writes, err
		}
	}
	// Repositories are only added: an AppProject never loses a repository while the cluster is
	// registered (an adopted project keeps what the original operator allowed). The write also
	// allows the repositories of the cluster's installs waiting behind this one (repoQueue).
	repos := append(append([]string{repo}, also...), s.repos.queued(name, t.Identity)...)
	if exists {
		repos = append(repos, existing.SourceRepos...)
	}
	desired := RenderProject(s.ns, n, t.Name, t.URL, repos, s.project)
	if t.Identity != "" {
		desired.Metadata.Annotations[AnnotationIdentity] = t.Identity
	}
	desired.seal()
	if exists && owned(existing) {
		switch ok, err := s.projectInSync(ctx, existing, desired); {
		case err != nil:
			return writes, err
		case ok:
			return writes, nil
		}
	}
	p, sent, err := s.writeProject(ctx, desired, !exists)
	writes += sent
	if err != nil {
		return writes, classify(err, "write appproject "+name)
	}
	s.projects.wrote(p)
	if !exists {
		s.logger.Info("Created AppProject", "appproject", name, "cluster", t.Name)
	}
	return writes, nil
}

// ensureTenantProject makes the AppProject name of grant g on the target's cluster exactly as the
// grant says (RenderTenantProject): unlike a cluster's project, it is rewritten when the grant
// narrows, so that Argo CD stops what the grant no longer allows. A project of that name that is
// not Enforcement's, or not this grant's on this cluster, is never written over.
func (s *Syncer) ensureTenantProject(ctx context.Context, t events.Target, name string, g *events.Grant) (int, error) {
	existing, exists, _ := s.projects.get(name)
	if exists && (!owned(existing) || existing.Annotations.Get(AnnotationCluster) != t.Name || existing.Annotations.Get(AnnotationGrant) != g.Name) {
		return 0, &failure{reason: ReasonNotOwned, permanent: true,
			err: fmt.Errorf("appproject %s exists and is not Enforcement's project of grant %s on cluster %s", name, g.Name, t.Name)}
	}
	desired := RenderTenantProject(s.ns, name, t.Name, t.URL, g)
	if t.Identity != "" {
		desired.Metadata.Annotations[AnnotationIdentity] = t.Identity
	}
	desired.seal()
	if exists {
		switch ok, err := s.projectInSync(ctx, existing, desired); {
		case err != nil:
			return 0, err
		case ok:
			return 0, nil
		}
	}
	p, writes, err := s.writeProject(ctx, desired, !exists)
	if err != nil {
		return writes, classify(err, "write appproject "+name)
	}
	s.projects.wrote(p)
	if !exists {
		s.logger.Info("Created AppProject", "appproject", name, "cluster", t.Name, "grant", g.Name)
	}
	return writes, nil
}

// deleteTenantProjects deletes the grants' AppProjects of a cluster (Enforcement's only), once
// none of its Applications is left. A grant project that Applications Enforcement does not manage
// use is kept, and marked for the unregistration to finish once they are gone (keepProject);
// held says so, and the cluster must then stay registered for them.
func (s *Syncer) deleteTenantProjects(ctx context.Context, cluster string) (held bool, err error) {
	for _, p := range s.tenantProjects(cluster) {
		if foreign := s.foreignApplications(p.Name); len(foreign) > 0 {
			held = true
			if err := s.keepProject(ctx, cluster, p, foreign); err != nil {
				return held, err
			}
			continue
		}
		err := s.argo.ArgoprojV1alpha1().AppProjects(s.ns).Delete(ctx, p.Name, sameUID(p))
		s.metrics.write("AppProject", "delete", err)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return held, classify(err, "delete appproject "+p.Name)
		}
		s.projects.removed(p.Name, p.GetUID(), false)
		s.logger.Info("Deleted AppProject", "appproject", p.Name, "cluster", cluster, "grant", p.Annotations.Get(AnnotationGrant))
	}
	return held, nil
}

// tenantProjects lists, sorted by name, Enforcement's grant AppProjects of the cluster (from the
// cache).
func (s *Syncer) tenantProjects(cluster string) []*cachedProject {
	var out []*cachedProject
	for _, p := range s.projects.list(indexTenantCluster, cluster) {
		if owned(p) && p.Annotations.Get(AnnotationGrant) != "" {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *cachedProject) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// registrationProjects lists Enforcement's AppProjects of the cluster (from the cache): its own
// first, when it has one, then its grants' (a cluster with only tenant Applications has no
// project of its own). A pending unregistration is marked on one of them.
func (s *Syncer) registrationProjects(cluster string) []*cachedProject {
	var out []*cachedProject
	if p, ok, _ := s.projects.get(s.names(cluster, "").project); ok && owned(p) {
		out = append(out, p)
	}
	return append(out, s.tenantProjects(cluster)...)
}

// unregisterPending reports whether one of projects carries AnnotationUnregister: the
// unregistration of their cluster waits for Applications to go.
func unregisterPending(projects []*cachedProject) bool {
	return slices.ContainsFunc(projects, func(p *cachedProject) bool { return p.Annotations.Get(AnnotationUnregister) != "" })
}

// clearUnregisterPending removes AnnotationUnregister from the cluster's AppProjects that carry
// it: an install wants the cluster registered, so an Application deleted later for another
// reason must not unregister it (finishUnregister). It returns the writes sent.
func (s *Syncer) clearUnregisterPending(ctx context.Context, cluster string) (int, error) {
	writes := 0
	patch := []byte(`{"metadata":{"annotations":{"` + AnnotationUnregister + `":null}}}`)
	for _, project := range s.registrationProjects(cluster) {
		if project.Annotations.Get(AnnotationUnregister) == "" {
			continue
		}
		p, err := s.argo.ArgoprojV1alpha1().AppProjects(s.ns).Patch(ctx, project.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		s.metrics.write("AppProject", "patch", err)
		writes++
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return writes, classify(err, "clear unregistration of appproject "+project.Name)
		}
		s.projects.wrote(cacheProject(p))
	}
	return writes, nil
}

// UninstallResult says what an uninstall did.
type UninstallResult struct {
	Application string
	Deleted     bool
	// Unregistered is true when the cluster's AppProject and Secret were removed.
	Unregistered bool
}

// Uninstall removes the intent's Application if Enforcement owns it (and the rule owns it),
// honouring the deletion policy (Orphan unless Cascade; always Orphan for a gone cluster), and
// then unregisters the cluster if no Application targets it any more. 404s and conflicts are
// tolerated.
func (s *Syncer) Uninstall(ctx context.Context, in *events.UninstallIntent) (UninstallResult, error) {
	unlock := s.clusters.lock(in.Cluster.Name)
	defer unlock()
	return s.uninstall(ctx, in)
}

// uninstall is Uninstall with the cluster's lock held.
func (s *Syncer) uninstall(ctx context.Context, in *events.UninstallIntent) (UninstallResult, error) {
	cluster := in.Cluster.Name
	names := s.names(cluster, in.Enforcement)
	name := names.application
	res := UninstallResult{Application: name}
	if err := s.nameConflict(in.Rule, in.Cluster, names); err != nil {
		// Another cluster of the same name owns what is there: this one has nothing to remove.
		s.logger.Info("Skipped uninstall of another cluster's objects", "application", name, "cluster", cluster, "reason", err)
		return res, nil
	}

	app, exists, terminating := s.apps.get(name)
	// Only Enforcement's own Application of this rule is deleted; a terminating one is already
	// on its way (a cascade waiting for Argo CD).
	if exists && !terminating && owned(app) && ruleOwns(app, in.Rule) && samePair(app, cluster, in.Enforcement) {
		cascade := in.DeletionPolicy == events.DeletionCascade && !in.Cluster.Gone
		deleted, err := s.deleteApplication(ctx, app, cascade)
		if err != nil {
			return res, err
		}
		res.Deleted = deleted
	}
	done, err := s.unregister(ctx, cluster)
	res.Unregistered = done
	return res, err
}

// samePair reports whether an Application was written for this cluster and enforcement (or
// carries no such record, as an adopted one before its first apply).
func samePair(app *cachedApplication, cluster, enforcement string) bool {
	c, e := app.Annotations.Get(AnnotationCluster), app.Annotations.Get(AnnotationEnforcement)
	return (c == "" || c == cluster) && (e == "" || e == enforcement)
}

// ruleOwns reports whether the Application was written for rule (or adopted without a rule).
func ruleOwns(app *cachedApplication, rule events.RuleRef) bool {
	r := app.Annotations.Get(AnnotationRule)
	return r == "" || r == rule.String()
}

// deleteApplication deletes app. Orphan: the resources finalizer is removed first, so Argo CD
// keeps the workload. Cascade: the finalizer is added first, so Argo CD deletes the workload
// before the Application goes. Conflicts re-read the object and try again; a 404 means done.
func (s *Syncer) deleteApplication(ctx context.Context, app *cachedApplication, cascade bool) (bool, error) {
	client := s.argo.ArgoprojV1alpha1().Applications(s.ns)
	for attempt := 0; ; attempt++ {
		has := slices.Contains(app.Finalizers, argov1.ResourcesFinalizerName)
		if has != cascade {
			finalizers := slices.DeleteFunc(slices.Clone(app.Finalizers), func(f string) bool { return f == argov1.ResourcesFinalizerName })
			if cascade {
				finalizers = append(finalizers, argov1.ResourcesFinalizerName)
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"finalizers": finalizers, "resourceVersion": app.GetResourceVersion()}})
			updated, err := client.Patch(ctx, app.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
			s.metrics.write("Application", "patch", err)
			if err != nil {
				if app, err = s.retryWrite(ctx, app, attempt, err, "set finalizers of application "+app.Name); app == nil || err != nil {
					return false, err
				}
				continue
			}
			app = cacheApplication(updated)
		}
		err := client.Delete(ctx, app.Name, sameUID(app))
		s.metrics.write("Application", "delete", err)
		if err != nil {
			if app, err = s.retryWrite(ctx, app, attempt, err, "delete application "+app.Name); app == nil || err != nil {
				return false, err
			}
			continue
		}
		s.apps.removed(app.Name, app.GetUID(), len(app.Finalizers) > 0)
		policy := "Orphan"
		if cascade {
			policy = "Cascade"
		}
		s.logger.Info("Deleted Application", "application", app.Name, "policy", policy)
		return true, nil
	}
}

// retryWrite decides what the error of a write in deleteApplication means: after a conflict
// (at most five attempts) it returns the Application read again, to try with; otherwise nil and
// the error to return, none when the Application is gone. what names the write in that error.
func (s *Syncer) retryWrite(ctx context.Context, app *cachedApplication, attempt int, err error, what string) (*cachedApplication, error) {
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case apierrors.IsConflict(err) && attempt < 5:
		return s.refetch(ctx, app.Name)
	default:
		return nil, classify(err, what)
	}
}

// refetch reads an Application after a conflict; nil without error when it is gone.
func (s *Syncer) refetch(ctx context.Context, name string) (*cachedApplication, error) {
	app, err := s.argo.ArgoprojV1alpha1().Applications(s.ns).Get(ctx, name, metav1.GetOptions{})
	s.metrics.read("Application", "conflict", err)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(err, "get application "+name)
	}
	return cacheApplication(app), nil
}

// unregister removes the cluster's grant AppProjects, its own AppProject and then its Secret
// (only those Enforcement owns) once no Application targets the cluster (applicationsLeft). While
// some are still being deleted it marks one of the cluster's AppProjects; the informer's delete
// events bring the cluster back to finishUnregister.
func (s *Syncer) unregister(ctx context.Context, cluster string) (bool, error) {
	alive, terminating, err := s.applicationsLeft(ctx, cluster)
	if err != nil || alive > 0 {
		return false, err
	}
	if terminating > 0 {
		if projects := s.registrationProjects(cluster); len(projects) > 0 && !unregisterPending(projects) {
			return false, s.markUnregisterPending(ctx, cluster, projects[0], terminating)
		}
		return false, nil
	}
	// Applications are gone (above), then the AppProjects that name the cluster (its grants',
	// then its own), then the cluster Secret: each step removes only what nothing left depends on.
	// A grant project foreign Applications use keeps the rest too: they deploy to this cluster.
	if held, err := s.deleteTenantProjects(ctx, cluster); held || err != nil {
		return false, err
	}
	return s.deleteRegistration(ctx, cluster)
}

// applicationsLeft counts the cluster's Applications that are alive and those being deleted.
// The cache is enough to see that some remain (the common case of a shared cluster: then it
// answers alive 1 without a request); otherwise the API server's answer counts, since the cache
// may not yet show an Application another instance just wrote. Earlier versions may have
// labelled them with another value (names.go): both count.
func (s *Syncer) applicationsLeft(ctx context.Context, cluster string) (alive, terminating int, err error) {
	labels := clusterLabels(cluster)
	for _, l := range labels {
		for _, a := range s.apps.list(indexCluster, l) {
			if _, ok, terminating := s.apps.get(a.Name); ok && !terminating {
				return 1, 0, nil
			}
		}
	}
	selector := LabelCluster + " in (" + strings.Join(labels, ",") + ")"
	apps, err := s.argo.ArgoprojV1alpha1().Applications(s.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, 0, classify(err, "list applications of cluster "+cluster)
	}
	// Terminating Applications (a cascade in progress) still need the cluster registered, or
	// Argo CD could not delete their resources.
	for _, a := range apps.Items {
		if a.DeletionTimestamp != nil {
			terminating++
		} else {
			alive++
		}
	}
	return alive, terminating, nil
}

// deleteRegistration deletes the cluster's own AppProject, unless Applications Enforcement does
// not manage still use it, and then its cluster Secret (Enforcement's only), once no
// Application and no grant project of the cluster is left.
func (s *Syncer) deleteRegistration(ctx context.Context, cluster string) (bool, error) {
	names := s.names(cluster, "")
	name := names.project
	project, exists, _ := s.projects.get(name)
	if exists && owned(project) {
		// Applications of someone else's in the project deploy to this cluster (the project
		// allows no other destination): the project and the registration stay for them.
		if foreign := s.foreignApplications(name); len(foreign) > 0 {
			return false, s.keepProject(ctx, cluster, project, foreign)
		}
		err := s.argo.ArgoprojV1alpha1().AppProjects(s.ns).Delete(ctx, name, sameUID(project))
		s.metrics.write("AppProject", "delete", err)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, classify(err, "delete appproject "+name)
		}
		s.projects.removed(name, project.GetUID(), false)
		s.logger.Info("Deleted AppProject", "appproject", name, "cluster", cluster)
	}
	secretName := names.secret
	if sec, ok, _ := s.secrets.get(secretName); ok && owned(sec) {
		err := s.clusterSecrets.Delete(ctx, secretName, sameUID(sec))
		s.metrics.write("Secret", "delete", err)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, classify(err, "delete cluster secret "+secretName)
		}
		s.secrets.removed(secretName, sec.GetUID(), false)
		s.logger.Info("Unregistered cluster", "cluster", cluster, "secret", secretName)
	}
	return true, nil
}

// markUnregisterPending marks project, one of the cluster's (registrationProjects), so that the
// unregistration finishes once its terminating Applications are gone (finishUnregister).
func (s *Syncer) markUnregisterPending(ctx context.Context, cluster string, project *cachedProject, terminating int) error {
	name := project.Name
	patch := []byte(`{"metadata":{"annotations":{"` + AnnotationUnregister + `":"pending"}}}`)
	p, err := s.argo.ArgoprojV1alpha1().AppProjects(s.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	s.metrics.write("AppProject", "patch", err)
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "mark appproject "+name)
	}
	if err == nil {
		s.projects.wrote(cacheProject(p))
	}
	s.logger.Info("Waiting for Applications to be deleted before unregistering cluster", "cluster", cluster, "terminating", terminating)
	return nil
}

// foreignApplications lists, sorted, the Applications in the AppProject project that
// Enforcement does not manage (from the cache).
func (s *Syncer) foreignApplications(project string) []string {
	var names []string
	for _, a := range s.apps.list(indexProject, project) {
		if !owned(a) {
			names = append(names, a.Name)
		}
	}
	slices.Sort(names)
	return names
}

// keepProject leaves the cluster's AppProject (its own or a grant's) and cluster Secret in place
// because foreign Applications use the project, and marks the project so that the unregistration finishes once
// they are gone (the informer's delete events bring the cluster back to finishUnregister).
func (s *Syncer) keepProject(ctx context.Context, cluster string, project *cachedProject, foreign []string) error {
	s.metrics.unregistrationHeld()
	s.logger.Warn("Kept AppProject used by Applications Enforcement does not manage; cluster stays registered",
		"appproject", project.Name, "cluster", cluster, "applications", foreign)
	if project.Annotations.Get(AnnotationUnregister) != "" {
		return nil
	}
	patch := []byte(`{"metadata":{"annotations":{"` + AnnotationUnregister + `":"pending"}}}`)
	p, err := s.argo.ArgoprojV1alpha1().AppProjects(s.ns).Patch(ctx, project.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	s.metrics.write("AppProject", "patch", err)
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "mark appproject "+project.Name)
	}
	if err == nil {
		s.projects.wrote(cacheProject(p))
	}
	return nil
}

// finishUnregister completes an unregistration that waited for terminating or foreign
// Applications. It only acts on a cluster one of whose AppProjects is marked pending, so an
// Application deleted for another reason does not unregister a cluster.
func (s *Syncer) finishUnregister(ctx context.Context, cluster string) error {
	unlock := s.clusters.lock(cluster)
	defer unlock()
	if !unregisterPending(s.registrationProjects(cluster)) {
		return nil
	}
	_, err := s.unregister(ctx, cluster)
	return err
}

// secretRef names a source Secret.
type secretRef struct{ kind, namespace, name string }

// credentialCache reads source Secrets and keeps the derived cluster config for a short TTL, so
// registering many clusters of one source reads its Secret once.
type credentialCache struct {
	kube    kubernetes.Interface
	ttl     time.Duration
	mu      sync.Mutex
	entries map[string]credentialEntry
	// fetching makes concurrent misses of one Secret wait for a single read.
	fetching keyedMutex
}

type credentialEntry struct {
	cfg     argov1.ClusterConfig
	fetched time.Time
}

func (c *credentialCache) get(ctx context.Context, ref secretRef) (argov1.ClusterConfig, error) {
	key := ref.namespace + "/" + ref.name
	if cfg, ok := c.cached(key); ok {
		return cfg, nil
	}
	unlock := c.fetching.lock(key)
	defer unlock()
	if cfg, ok := c.cached(key); ok {
		return cfg, nil
	}
	cfg, err := c.read(ctx, ref)
	if err != nil {
		return cfg, err
	}
	c.mu.Lock()
	c.entries[key] = credentialEntry{cfg: cfg, fetched: time.Now()}
	c.mu.Unlock()
	return cfg, nil
}

// read reads a Secret and derives the cluster config from it, bypassing the cache.
func (c *credentialCache) read(ctx context.Context, ref secretRef) (argov1.ClusterConfig, error) {
	key := ref.namespace + "/" + ref.name
	what := "source secret"
	if ref.kind == KindOCM {
		what = "ocm cluster credentials secret"
	}
	sec, err := c.kube.CoreV1().Secrets(ref.namespace).Get(ctx, ref.name, metav1.GetOptions{})
	if err != nil {
		return argov1.ClusterConfig{}, &failure{reason: ReasonSecretInvalid, err: fmt.Errorf("read %s %s: %w", what, key, err)}
	}
	cfg, err := ClusterConfigFromSecret(ref.kind, sec.Data)
	if err != nil {
		return cfg, &failure{reason: ReasonSecretInvalid, err: fmt.Errorf("%s %s: %w", what, key, err)}
	}
	return cfg, nil
}

func (c *credentialCache) cached(key string) (argov1.ClusterConfig, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return e.cfg, ok && time.Since(e.fetched) < c.ttl
}

func ptr[T any](v T) *T { return &v }
