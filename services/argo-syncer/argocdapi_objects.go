package main

// The clients of API mode: the typed clients the Syncer reads and writes through (Applications,
// AppProjects, cluster Secrets), implemented with Argo CD's API so that every decision of the
// Syncer (ownership, adoption, order of unregistration) is the same code in both modes.
//
//   - Applications: Get, List (by label selector) and Watch are Argo CD's own; an apply is a
//     create with upsert (one request, as the original operator did); a merge patch reads the
//     Application, patches it and updates it; a delete checks the UID first and passes the
//     cascade the Syncer chose through the finalizer.
//   - AppProjects: Argo CD's upsert replaces the spec only, so an apply or a merge patch reads
//     the project, patches it and updates it (or creates it). The API has no watch for them:
//     they are listed every ARGO_POLL_INTERVAL and the differences are the watch events.
//   - Clusters: Argo CD's API registers a cluster by its URL and keeps its Secret itself. Each
//     cluster is shown to the Syncer as the Secret of the declarative mode: named
//     "cluster-<cluster>" for Enforcement's (the enforcement.globo.com/cluster annotation),
//     "argocd-api:<server>" for the others, with data name, server and config (Argo CD never
//     returns credentials: the config read back is without them). Polled like AppProjects.
//
// Only the methods the Syncer calls are implemented; the embedded interfaces are nil, so calling
// another one panics, which a test would show at once.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	applicationpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/application"
	clusterpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/cluster"
	projectpkg "github.com/argoproj/argo-cd/v2/pkg/apiclient/project"
	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	argoclient "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned"
	argotyped "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned/typed/application/v1alpha1"
	jsonpatch "github.com/evanphx/json-patch"
	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	coretyped "k8s.io/client-go/kubernetes/typed/core/v1"
)

// AnnotationRegistrationID marks a cluster Enforcement registered through Argo CD's API with a
// random id, which stands for the Secret's UID (the API shows none): a cluster unregistered and
// registered again is another object.
const AnnotationRegistrationID = "enforcement.globo.com/registration-id"

// argoAPIClients builds the clients of API mode over one session; ns is the namespace the
// objects are shown in (ARGOCD_NAMESPACE: Argo CD's API does not need it).
func argoAPIClients(session *argoSession, ns string, poll time.Duration, logger *slog.Logger) (argoclient.Interface, coretyped.SecretInterface) {
	apps := &apiApplications{s: session, ns: ns}
	projects := &apiProjects{s: session, ns: ns}
	projects.poller = newPoller(poll, logger.With("objects", "AppProjects"), projects.listAll, func(items []*argov1.AppProject) runtime.Object {
		l := &argov1.AppProjectList{}
		for _, p := range items {
			l.Items = append(l.Items, *p)
		}
		return l
	})
	secrets := &apiClusterSecrets{s: session, ns: ns, servers: map[string]string{}}
	secrets.poller = newPoller(poll, logger.With("objects", "clusters"), secrets.listAll, func(items []*corev1.Secret) runtime.Object {
		l := &corev1.SecretList{}
		for _, s := range items {
			l.Items = append(l.Items, *s)
		}
		return l
	})
	return &apiClientset{v1: &apiArgoprojV1alpha1{apps: apps, projects: projects}}, secrets
}

// apiClientset is argoclient.Interface over Argo CD's API.
type apiClientset struct {
	argoclient.Interface
	v1 *apiArgoprojV1alpha1
}

func (c *apiClientset) ArgoprojV1alpha1() argotyped.ArgoprojV1alpha1Interface { return c.v1 }

type apiArgoprojV1alpha1 struct {
	argotyped.ArgoprojV1alpha1Interface
	apps     *apiApplications
	projects *apiProjects
}

func (c *apiArgoprojV1alpha1) Applications(string) argotyped.ApplicationInterface { return c.apps }
func (c *apiArgoprojV1alpha1) AppProjects(string) argotyped.AppProjectInterface   { return c.projects }

// apiApplications is the Applications client of API mode.
type apiApplications struct {
	argotyped.ApplicationInterface
	s  *argoSession
	ns string
}

func (a *apiApplications) err(err error, name string) error {
	return kubeError(err, "applications", name, a.s.cfg.URL)
}

func (a *apiApplications) local(app *argov1.Application) *argov1.Application {
	app.Namespace = a.ns
	return app
}

func (a *apiApplications) Get(ctx context.Context, name string, _ metav1.GetOptions) (*argov1.Application, error) {
	app, err := argoCall(ctx, a.s, "ApplicationService.Get", func(c *argoClients) (*argov1.Application, error) {
		return c.apps.Get(ctx, &applicationpkg.ApplicationQuery{Name: &name})
	})
	if err != nil {
		return nil, a.err(err, name)
	}
	return a.local(app), nil
}

func (a *apiApplications) List(ctx context.Context, opts metav1.ListOptions) (*argov1.ApplicationList, error) {
	list, err := argoCall(ctx, a.s, "ApplicationService.List", func(c *argoClients) (*argov1.ApplicationList, error) {
		return c.apps.List(ctx, &applicationpkg.ApplicationQuery{Selector: &opts.LabelSelector})
	})
	if err != nil {
		return nil, a.err(err, "")
	}
	for i := range list.Items {
		a.local(&list.Items[i])
	}
	return list, nil
}

// Watch follows Argo CD's stream of Application events from the listed version. When the
// stream ends, it reports the version as expired so that the informer lists again: events
// missed in between (a deletion above all) cannot be replayed.
func (a *apiApplications) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := argoCall(ctx, a.s, "ApplicationService.Watch", func(c *argoClients) (applicationpkg.ApplicationService_WatchClient, error) {
		return c.apps.Watch(ctx, &applicationpkg.ApplicationQuery{Selector: &opts.LabelSelector, ResourceVersion: &opts.ResourceVersion})
	})
	if err != nil {
		cancel()
		return nil, a.err(err, "")
	}
	w := &streamWatch{ch: make(chan watch.Event), cancel: cancel}
	go func() {
		defer close(w.ch)
		for {
			ev, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil {
					w.send(ctx, watch.Event{Type: watch.Error, Object: &metav1.Status{
						Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired,
						Message: fmt.Sprintf("Argo CD's watch of Applications ended: %v", err)}})
				}
				return
			}
			app := ev.Application
			if !w.send(ctx, watch.Event{Type: ev.Type, Object: a.local(&app)}) {
				return
			}
		}
	}()
	return w, nil
}

// Patch applies (create with upsert, Argo CD's update of spec, labels and annotations) or
// merge-patches (read, patch, update) an Application.
func (a *apiApplications) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*argov1.Application, error) {
	switch pt {
	case types.ApplyPatchType:
		var app argov1.Application
		if err := json.Unmarshal(data, &app); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("application %s: %v", name, err))
		}
		app.Namespace = ""
		created, err := argoCall(ctx, a.s, "ApplicationService.Create", func(c *argoClients) (*argov1.Application, error) {
			return c.apps.Create(ctx, &applicationpkg.ApplicationCreateRequest{Application: &app, Upsert: ptr(true), Validate: ptr(false)})
		})
		if err != nil {
			return nil, a.err(err, name)
		}
		return a.local(created), nil
	case types.MergePatchType:
		current, err := a.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		var patched argov1.Application
		if err := mergePatch(current, data, &patched); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("application %s: %v", name, err))
		}
		patched.Namespace = ""
		updated, err := argoCall(ctx, a.s, "ApplicationService.Update", func(c *argoClients) (*argov1.Application, error) {
			return c.apps.Update(ctx, &applicationpkg.ApplicationUpdateRequest{Application: &patched, Validate: ptr(false)})
		})
		if err != nil {
			return nil, a.err(err, name)
		}
		return a.local(updated), nil
	}
	return nil, apierrors.NewBadRequest(fmt.Sprintf("API mode: patch type %s not supported", pt))
}

// Delete deletes an Application after checking the UID precondition. Argo CD decides the
// cascade by its request, not by the finalizer: the request says what the finalizer says, which
// the Syncer set as the deletion policy wants.
func (a *apiApplications) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	current, err := a.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := checkUID(opts, current.UID, argov1.Resource("applications"), name); err != nil {
		return err
	}
	cascade := slices.Contains(current.Finalizers, argov1.ResourcesFinalizerName)
	_, err = argoCall(ctx, a.s, "ApplicationService.Delete", func(c *argoClients) (*applicationpkg.ApplicationResponse, error) {
		return c.apps.Delete(ctx, &applicationpkg.ApplicationDeleteRequest{Name: &name, Cascade: &cascade})
	})
	return a.err(err, name)
}

// apiProjects is the AppProjects client of API mode.
type apiProjects struct {
	argotyped.AppProjectInterface
	s      *argoSession
	ns     string
	poller *poller[*argov1.AppProject]
}

func (p *apiProjects) err(err error, name string) error {
	return kubeError(err, "appprojects", name, p.s.cfg.URL)
}

func (p *apiProjects) Get(ctx context.Context, name string, _ metav1.GetOptions) (*argov1.AppProject, error) {
	project, err := argoCall(ctx, p.s, "ProjectService.Get", func(c *argoClients) (*argov1.AppProject, error) {
		return c.projects.Get(ctx, &projectpkg.ProjectQuery{Name: name})
	})
	if err != nil {
		return nil, p.err(err, name)
	}
	project.Namespace = p.ns
	return project, nil
}

func (p *apiProjects) listAll(ctx context.Context) ([]*argov1.AppProject, error) {
	list, err := argoCall(ctx, p.s, "ProjectService.List", func(c *argoClients) (*argov1.AppProjectList, error) {
		return c.projects.List(ctx, &projectpkg.ProjectQuery{})
	})
	if err != nil {
		return nil, p.err(err, "")
	}
	out := make([]*argov1.AppProject, len(list.Items))
	for i := range list.Items {
		list.Items[i].Namespace = p.ns
		out[i] = &list.Items[i]
	}
	return out, nil
}

func (p *apiProjects) List(ctx context.Context, opts metav1.ListOptions) (*argov1.AppProjectList, error) {
	obj, err := p.poller.list(ctx, opts)
	if err != nil {
		return nil, err
	}
	return obj.(*argov1.AppProjectList), nil
}

func (p *apiProjects) Watch(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
	return p.poller.watch(ctx), nil
}

// Patch applies or merge-patches an AppProject: both read it, patch it (an apply body is a
// patch of the fields it sets; lists are replaced whole, as server-side apply does for these
// types) and update it, or create it when it does not exist.
func (p *apiProjects) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*argov1.AppProject, error) {
	if pt != types.ApplyPatchType && pt != types.MergePatchType {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("API mode: patch type %s not supported", pt))
	}
	current, err := p.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && pt == types.ApplyPatchType {
		var project argov1.AppProject
		if err := json.Unmarshal(data, &project); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("appproject %s: %v", name, err))
		}
		project.Namespace = ""
		created, err := argoCall(ctx, p.s, "ProjectService.Create", func(c *argoClients) (*argov1.AppProject, error) {
			return c.projects.Create(ctx, &projectpkg.ProjectCreateRequest{Project: &project})
		})
		if err != nil {
			return nil, p.err(err, name)
		}
		created.Namespace = p.ns
		return created, nil
	}
	if err != nil {
		return nil, err
	}
	var patched argov1.AppProject
	if err := mergePatch(current, data, &patched); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("appproject %s: %v", name, err))
	}
	patched.Namespace = ""
	updated, err := argoCall(ctx, p.s, "ProjectService.Update", func(c *argoClients) (*argov1.AppProject, error) {
		return c.projects.Update(ctx, &projectpkg.ProjectUpdateRequest{Project: &patched})
	})
	if err != nil {
		return nil, p.err(err, name)
	}
	updated.Namespace = p.ns
	return updated, nil
}

func (p *apiProjects) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	current, err := p.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := checkUID(opts, current.UID, argov1.Resource("appprojects"), name); err != nil {
		return err
	}
	_, err = argoCall(ctx, p.s, "ProjectService.Delete", func(c *argoClients) (*projectpkg.EmptyResponse, error) {
		return c.projects.Delete(ctx, &projectpkg.ProjectQuery{Name: name})
	})
	return p.err(err, name)
}

// apiClusterSecrets shows Argo CD's clusters as the cluster Secrets of the declarative mode.
type apiClusterSecrets struct {
	coretyped.SecretInterface
	s      *argoSession
	ns     string
	poller *poller[*corev1.Secret]

	mu      sync.Mutex
	servers map[string]string // Secret name → cluster URL, from the last listing and writes
}

func (c *apiClusterSecrets) err(err error, name string) error {
	return kubeError(err, "clusters", name, c.s.cfg.URL)
}

// secretName is the name a cluster is shown under.
func secretName(cl *argov1.Cluster) string {
	if cl.Labels[LabelManagedBy] == ManagedByValue && cl.Annotations[AnnotationCluster] != "" {
		return ClusterSecretName(cl.Annotations[AnnotationCluster])
	}
	return "argocd-api:" + cl.Server
}

// clusterToSecret shows a cluster as a Secret. Its UID is the registration id Enforcement
// wrote, or else stands for the URL; its resource version is a digest of what it shows.
func (c *apiClusterSecrets) clusterToSecret(cl *argov1.Cluster) *corev1.Secret {
	config, _ := json.Marshal(cl.Config)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: secretName(cl), Namespace: c.ns,
			Labels:      map[string]string{LabelSecretType: SecretTypeCluster},
			Annotations: map[string]string{},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"name": []byte(cl.Name), "server": []byte(cl.Server), "config": config},
	}
	for k, v := range cl.Labels {
		sec.Labels[k] = v
	}
	for k, v := range cl.Annotations {
		sec.Annotations[k] = v
	}
	sec.UID = types.UID("argocd-api:" + cl.Server)
	if id := cl.Annotations[AnnotationRegistrationID]; id != "" {
		sec.UID = types.UID(id)
	}
	body, _ := json.Marshal(struct {
		M metav1.ObjectMeta
		D map[string][]byte
	}{sec.ObjectMeta, sec.Data})
	sum := sha256.Sum256(body)
	sec.ResourceVersion = "sha256:" + hex.EncodeToString(sum[:8])
	return sec
}

// secretToCluster is the cluster a Secret of the declarative mode registers.
func secretToCluster(sec *corev1.Secret) (*argov1.Cluster, error) {
	cl := &argov1.Cluster{Name: string(sec.Data["name"]), Server: string(sec.Data["server"]), Labels: map[string]string{}, Annotations: map[string]string{}}
	if err := json.Unmarshal(sec.Data["config"], &cl.Config); err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	for k, v := range sec.Labels {
		if k != LabelSecretType {
			cl.Labels[k] = v
		}
	}
	for k, v := range sec.Annotations {
		cl.Annotations[k] = v
	}
	return cl, nil
}

func (c *apiClusterSecrets) listAll(ctx context.Context) ([]*corev1.Secret, error) {
	list, err := argoCall(ctx, c.s, "ClusterService.List", func(cc *argoClients) (*argov1.ClusterList, error) {
		return cc.clusters.List(ctx, &clusterpkg.ClusterQuery{})
	})
	if err != nil {
		return nil, c.err(err, "")
	}
	out := make([]*corev1.Secret, len(list.Items))
	servers := map[string]string{}
	for i := range list.Items {
		out[i] = c.clusterToSecret(&list.Items[i])
		servers[out[i].Name] = list.Items[i].Server
	}
	c.mu.Lock()
	c.servers = servers
	c.mu.Unlock()
	return out, nil
}

func (c *apiClusterSecrets) List(ctx context.Context, opts metav1.ListOptions) (*corev1.SecretList, error) {
	obj, err := c.poller.list(ctx, opts)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.SecretList), nil
}

func (c *apiClusterSecrets) Watch(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
	return c.poller.watch(ctx), nil
}

// current reads the cluster shown as the Secret name from Argo CD.
func (c *apiClusterSecrets) current(ctx context.Context, name string) (*argov1.Cluster, error) {
	c.mu.Lock()
	server, ok := c.servers[name]
	c.mu.Unlock()
	if !ok {
		if _, err := c.listAll(ctx); err != nil {
			return nil, err
		}
		c.mu.Lock()
		server, ok = c.servers[name]
		c.mu.Unlock()
	}
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	cl, err := argoCall(ctx, c.s, "ClusterService.Get", func(cc *argoClients) (*argov1.Cluster, error) {
		return cc.clusters.Get(ctx, &clusterpkg.ClusterQuery{Server: server})
	})
	if status := kubeError(err, "clusters", name, c.s.cfg.URL); apierrors.IsForbidden(status) {
		// Argo CD answers a cluster it does not know with PermissionDenied.
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	if err != nil {
		return nil, c.err(err, name)
	}
	return cl, nil
}

// Create registers the cluster the Secret describes; Argo CD connects to it first.
func (c *apiClusterSecrets) Create(ctx context.Context, sec *corev1.Secret, _ metav1.CreateOptions) (*corev1.Secret, error) {
	cl, err := secretToCluster(sec)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("secret %s: %v", sec.Name, err))
	}
	return c.register(ctx, sec.Name, cl)
}

func (c *apiClusterSecrets) register(ctx context.Context, name string, cl *argov1.Cluster) (*corev1.Secret, error) {
	cl.Annotations[AnnotationRegistrationID] = uuid.NewString()
	created, err := argoCall(ctx, c.s, "ClusterService.Create", func(cc *argoClients) (*argov1.Cluster, error) {
		return cc.clusters.Create(ctx, &clusterpkg.ClusterCreateRequest{Cluster: cl})
	})
	if err != nil {
		return nil, c.err(err, name)
	}
	sec := c.clusterToSecret(created)
	c.mu.Lock()
	c.servers[sec.Name] = created.Server
	c.mu.Unlock()
	return sec, nil
}

// Patch merge-patches the Secret a cluster is shown as and updates the fields the patch names.
// A new URL is a new registration in Argo CD's API (it keys clusters by URL): the patch must
// then carry the config, which Argo CD never returns.
func (c *apiClusterSecrets) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*corev1.Secret, error) {
	if pt != types.MergePatchType {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("API mode: patch type %s not supported for cluster secrets", pt))
	}
	cl, err := c.current(ctx, name)
	if err != nil {
		return nil, err
	}
	var patched corev1.Secret
	if err := mergePatch(c.clusterToSecret(cl), data, &patched); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("secret %s: %v", name, err))
	}
	next, err := secretToCluster(&patched)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("secret %s: %v", name, err))
	}
	var p struct {
		Metadata struct {
			Labels      map[string]any `json:"labels"`
			Annotations map[string]any `json:"annotations"`
		} `json:"metadata"`
		Data map[string]any `json:"data"`
	}
	_ = json.Unmarshal(data, &p) // mergePatch parsed it already
	if next.Server != cl.Server {
		if _, ok := p.Data["config"]; !ok {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("secret %s: moving cluster %s to %s through Argo CD's API needs its credentials in the same patch", name, cl.Server, next.Server))
		}
		return c.move(ctx, name, cl, next)
	}
	var fields []string
	for field, changed := range map[string]bool{
		"name": next.Name != cl.Name, "config": p.Data["config"] != nil,
		"labels": p.Metadata.Labels != nil, "annotations": p.Metadata.Annotations != nil,
	} {
		if changed {
			fields = append(fields, field)
		}
	}
	slices.Sort(fields)
	if len(fields) == 0 {
		return c.clusterToSecret(cl), nil
	}
	updated, err := argoCall(ctx, c.s, "ClusterService.Update", func(cc *argoClients) (*argov1.Cluster, error) {
		return cc.clusters.Update(ctx, &clusterpkg.ClusterUpdateRequest{Cluster: next, UpdatedFields: fields})
	})
	if err != nil {
		return nil, c.err(err, name)
	}
	return c.clusterToSecret(updated), nil
}

// move registers the cluster at its new URL, then removes the registration at the old one.
func (c *apiClusterSecrets) move(ctx context.Context, name string, old, next *argov1.Cluster) (*corev1.Secret, error) {
	sec, err := c.register(ctx, name, next)
	if err != nil {
		return nil, err
	}
	_, err = argoCall(ctx, c.s, "ClusterService.Delete", func(cc *argoClients) (*clusterpkg.ClusterResponse, error) {
		return cc.clusters.Delete(ctx, &clusterpkg.ClusterQuery{Server: old.Server})
	})
	if err != nil {
		return nil, c.err(err, name)
	}
	return sec, nil
}

// Delete removes the cluster's registration after checking the UID precondition.
func (c *apiClusterSecrets) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	cl, err := c.current(ctx, name)
	if err != nil {
		return err
	}
	if err := checkUID(opts, c.clusterToSecret(cl).UID, corev1.Resource("secrets"), name); err != nil {
		return err
	}
	_, err = argoCall(ctx, c.s, "ClusterService.Delete", func(cc *argoClients) (*clusterpkg.ClusterResponse, error) {
		return cc.clusters.Delete(ctx, &clusterpkg.ClusterQuery{Server: cl.Server})
	})
	if err != nil {
		return c.err(err, name)
	}
	c.mu.Lock()
	delete(c.servers, name)
	c.mu.Unlock()
	return nil
}

// checkUID is the UID precondition of a delete.
func checkUID(opts metav1.DeleteOptions, uid types.UID, resource schema.GroupResource, name string) error {
	if opts.Preconditions != nil && opts.Preconditions.UID != nil && *opts.Preconditions.UID != uid {
		return apierrors.NewConflict(resource, name,
			fmt.Errorf("precondition failed: UID in precondition: %s, UID in object: %s", *opts.Preconditions.UID, uid))
	}
	return nil
}

// mergePatch applies the JSON merge patch data to current and decodes the result into out.
func mergePatch(current any, data []byte, out any) error {
	body, err := json.Marshal(current)
	if err != nil {
		return err
	}
	merged, err := jsonpatch.MergePatch(body, data)
	if err != nil {
		return fmt.Errorf("merge patch: %w", err)
	}
	return json.Unmarshal(merged, out)
}

// poller lists objects every interval and turns the differences into watch events, for the
// objects Argo CD's API cannot watch. The informer's list goes through it too, so that its
// first differences are against what the informer holds.
type poller[T kubeObject] struct {
	interval time.Duration
	logger   *slog.Logger
	listAll  func(context.Context) ([]T, error)
	toList   func([]T) runtime.Object

	mu    sync.Mutex
	known map[string]T
}

func newPoller[T kubeObject](interval time.Duration, logger *slog.Logger, listAll func(context.Context) ([]T, error), toList func([]T) runtime.Object) *poller[T] {
	return &poller[T]{interval: interval, logger: logger, listAll: listAll, toList: toList, known: map[string]T{}}
}

func (p *poller[T]) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	items, err := p.listAll(ctx)
	if err != nil {
		return nil, err
	}
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	p.mu.Lock()
	p.known = map[string]T{}
	var matching []T
	for _, o := range items {
		if sel.Matches(labels.Set(o.GetLabels())) {
			p.known[o.GetName()] = o
			matching = append(matching, o)
		}
	}
	p.mu.Unlock()
	return p.toList(matching), nil
}

// watch polls until ctx ends or the watch is stopped. A failed listing is logged and tried
// again at the next tick: nothing is reported gone because Argo CD did not answer.
func (p *poller[T]) watch(ctx context.Context) watch.Interface {
	ctx, cancel := context.WithCancel(ctx)
	w := &streamWatch{ch: make(chan watch.Event), cancel: cancel}
	go func() {
		defer close(w.ch)
		t := time.NewTicker(p.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			items, err := p.listAll(ctx)
			if err != nil {
				if ctx.Err() == nil {
					p.logger.Warn("Listing from Argo CD's API failed; trying again", "error", err, "in", p.interval)
				}
				continue
			}
			for _, ev := range p.diff(items) {
				if !w.send(ctx, ev) {
					return
				}
			}
		}
	}()
	return w
}

// diff updates what is known and returns the events that take the informer there.
func (p *poller[T]) diff(items []T) []watch.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var events []watch.Event
	seen := map[string]bool{}
	for _, o := range items {
		name := o.GetName()
		seen[name] = true
		old, ok := p.known[name]
		switch {
		case !ok:
			events = append(events, watch.Event{Type: watch.Added, Object: o})
		case old.GetResourceVersion() != o.GetResourceVersion() || old.GetUID() != o.GetUID():
			events = append(events, watch.Event{Type: watch.Modified, Object: o})
		default:
			continue
		}
		p.known[name] = o
	}
	for name, o := range p.known {
		if !seen[name] {
			events = append(events, watch.Event{Type: watch.Deleted, Object: o})
			delete(p.known, name)
		}
	}
	return events
}

// streamWatch is a watch.Interface fed by a goroutine.
type streamWatch struct {
	ch     chan watch.Event
	cancel context.CancelFunc
	once   sync.Once
}

func (w *streamWatch) ResultChan() <-chan watch.Event { return w.ch }
func (w *streamWatch) Stop()                          { w.once.Do(w.cancel) }

// send delivers ev unless the watch was stopped.
func (w *streamWatch) send(ctx context.Context, ev watch.Event) bool {
	select {
	case w.ch <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}
