package main

// Adoption. Enforcement takes over the Argo CD objects the original operator (globocom/enforcement)
// created, so that a migration neither duplicates nor fails on them, and nothing else: an object
// of someone else's that merely carries a familiar name or the cluster_name label stays theirs
// (an install over it fails with reason NotOwned, naming what differs).
//
// The original's shapes, from its source (app/data/argo/application.py and project.py, created
// through the Argo CD API, which stores an empty project as "default"):
//
//	Application "<cluster>-<enforcement>": labels exactly {cluster_name: <cluster>};
//	  spec.project unset ("default"); destination {name: <cluster>, namespace: ...}, no server;
//	  one source (repoURL, path, optional helm parameters); syncPolicy.automated with prune
//	  and selfHeal.
//	AppProject "<cluster>": no labels; destinations only the cluster's ({server: <cluster URL>,
//	  namespace: '*'}, in older versions also {name: <cluster>}); sourceRepos ['*']; no roles,
//	  sync windows, signature keys, source namespaces or resource allow/deny lists.
//
// An adopted object is first marked (managed-by label, AnnotationAdoptedFrom and
// AnnotationAdoptedAt) by a merge patch conditioned on the resourceVersion that was checked, and
// only then applied: the take-over is of exactly the object that matched, and the record is
// written under a plain update, so later server-side applies (which do not send it) keep it.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Adoption record on an object Enforcement took over.
const (
	// AnnotationAdoptedFrom names who created an adopted object (OriginOriginalOperator).
	AnnotationAdoptedFrom = "enforcement.globo.com/adopted-from"
	// AnnotationAdoptedAt is when Enforcement took the object over (RFC 3339, UTC).
	AnnotationAdoptedAt = "enforcement.globo.com/adopted-at"
	// OriginOriginalOperator is the original operator, the only origin adopted.
	OriginOriginalOperator = "globocom/enforcement"
)

// originalApplication reports why app is not an Application the original operator created for
// cluster: "" when it has exactly that shape (see the file comment), else what differs.
func originalApplication(app *cachedApplication, cluster string) string {
	var why []string
	if v, ok := app.Labels.Lookup(LabelManagedBy); ok {
		why = append(why, fmt.Sprintf("label %s=%s", LabelManagedBy, v))
	}
	if app.Labels.Get(LabelCluster) != cluster || app.Labels.Len() != 1 {
		why = append(why, fmt.Sprintf("labels are %s, want only %s=%s", labelList(app.Labels.Map()), LabelCluster, cluster))
	}
	spec := app.Foreign
	if spec == nil { // an Application of Enforcement's own, whose spec the cache does not keep
		return strings.Join(append(why, "managed by Enforcement"), "; ")
	}
	if p := spec.Project; p != "" && p != argov1.DefaultAppProjectName && p != ProjectName(cluster) {
		why = append(why, fmt.Sprintf("project %s", p))
	}
	if d := spec.Destination; d.Name != cluster || d.Server != "" {
		why = append(why, fmt.Sprintf("destination name %q server %q, want name %q", d.Name, d.Server, cluster))
	}
	if spec.Source == nil || len(spec.Sources) > 0 {
		why = append(why, "not a single source")
	}
	if sp := spec.SyncPolicy; sp == nil || sp.Automated == nil || !sp.Automated.Prune || !sp.Automated.SelfHeal {
		why = append(why, "sync policy is not automated with prune and self-heal")
	}
	return strings.Join(why, "; ")
}

// originalProject reports why p is not the AppProject the original operator created for the
// cluster t: "" when it has exactly that shape (see the file comment), else what differs. Argo
// CD's built-in "default" project is never the original's, even for a cluster named "default".
func originalProject(p *cachedProject, t events.Target) string {
	if p.Name == argov1.DefaultAppProjectName {
		return "it is Argo CD's default project"
	}
	if p.Foreign == nil {
		return "it is Enforcement's"
	}
	var why []string
	if p.Labels.Len() > 0 {
		why = append(why, "labels "+labelList(p.Labels.Map()))
	}
	if !slices.Equal(p.SourceRepos, []string{"*"}) {
		why = append(why, fmt.Sprintf("sourceRepos %q, want [*]", p.SourceRepos))
	}
	if len(p.Foreign.Destinations) == 0 {
		why = append(why, "no destinations")
	}
	for _, d := range p.Foreign.Destinations {
		if (d.Server == "" && d.Name == "") || (d.Server != "" && d.Server != t.URL) || (d.Name != "" && d.Name != t.Name) {
			why = append(why, fmt.Sprintf("destination name %q server %q is not cluster %s", d.Name, d.Server, t.Name))
		}
	}
	s := p.Foreign
	if len(s.Roles)+len(s.SyncWindows)+len(s.SignatureKeys)+len(s.SourceNamespaces)+len(s.ClusterResourceWhitelist)+
		len(s.ClusterResourceBlacklist)+len(s.NamespaceResourceWhitelist)+len(s.NamespaceResourceBlacklist) > 0 {
		why = append(why, "roles, sync windows, signature keys, source namespaces or resource lists are set")
	}
	return strings.Join(why, "; ")
}

// labelList prints labels sorted, for a message.
func labelList(labels map[string]string) string {
	list := make([]string, 0, len(labels))
	for k, v := range labels {
		list = append(list, k+"="+v)
	}
	slices.Sort(list)
	return "[" + strings.Join(list, ",") + "]"
}

// adoptionPatch is the merge patch that takes an object over: the managed-by label and the
// adoption record, applied only if the object is still at resourceVersion.
func adoptionPatch(resourceVersion string, now time.Time) []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion,
		"labels":          map[string]string{LabelManagedBy: ManagedByValue},
		"annotations": map[string]string{
			AnnotationAdoptedFrom: OriginOriginalOperator,
			AnnotationAdoptedAt:   now.UTC().Format(time.RFC3339),
		},
	}})
	return patch
}

// adoptApplication takes over app, which originalApplication accepted, at the version checked.
func (s *Syncer) adoptApplication(ctx context.Context, app *cachedApplication) error {
	adopted, err := s.argo.ArgoprojV1alpha1().Applications(s.ns).Patch(ctx, app.Name, types.MergePatchType,
		adoptionPatch(app.GetResourceVersion(), time.Now()), metav1.PatchOptions{FieldManager: FieldManager})
	s.metrics.write("Application", "patch", err)
	if err != nil {
		return classify(err, "adopt application "+app.Name)
	}
	s.apps.wrote(cacheApplication(adopted))
	return nil
}

// adoptProject takes over p, which originalProject accepted for cluster, at the version checked.
func (s *Syncer) adoptProject(ctx context.Context, p *cachedProject, cluster string) error {
	adopted, err := s.argo.ArgoprojV1alpha1().AppProjects(s.ns).Patch(ctx, p.Name, types.MergePatchType,
		adoptionPatch(p.GetResourceVersion(), time.Now()), metav1.PatchOptions{FieldManager: FieldManager})
	s.metrics.write("AppProject", "patch", err)
	if err != nil {
		return classify(err, "adopt appproject "+p.Name)
	}
	s.projects.wrote(cacheProject(adopted))
	s.logger.Info("Adopted AppProject", "appproject", p.Name, "cluster", cluster, "from", OriginOriginalOperator)
	return nil
}
