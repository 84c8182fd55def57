package main

// Names. argo-syncer names a cluster's objects after the cluster: the cluster Secret
// "cluster-<cluster>", the AppProject "<cluster>" and the Application "<cluster>-<enforcement>",
// each through events.ObjectName, which keeps a valid name and normalises any other with a hash
// suffix of 64 bits, so that nobody can craft a cluster name that normalises to another
// cluster's object name.
//
// Versions before normalised with a 32-bit suffix (events.LegacyObjectName), and objects they
// wrote under those names keep them: argo-syncer finds an object under its legacy name and keeps
// using it, rather than writing a second one under the new name. Renaming it instead would mean
// deleting it: an Application deleted and created again under another name re-syncs its
// workload from scratch (hooks run again, Argo CD's history is lost, and resources the new one
// does not render stay orphaned), an AppProject cannot be deleted while Applications name it,
// and a second cluster Secret with the same server confuses Argo CD. So the legacy name is used
// when, and only when:
//
//   - no object exists under the new name (an object there, of whoever, is what the new name
//     leads to, as for any name), and
//   - the object under the legacy name is Enforcement's (managed-by label) and was written for
//     this cluster (AnnotationCluster; for an Application also this enforcement), as every
//     version wrote it. One written for another cluster is that cluster's: a name crafted to
//     collide under 32 bits no longer leads to it. Its provider identity is not compared here:
//     a same-named cluster of another identity is found, and refused (NameConflict), as before.
//
// Legacy objects keep their cluster_name label value too (legacyClusterLabel), so an upgrade
// writes nothing; lookups by label ask for both values. Names are resolved from the informer
// caches under the cluster's lock, by every path that reads or writes the objects (install,
// uninstall, unregistration, resync, NameConflict), so they all find the same object. Nothing
// outside argo-syncer reads these objects by name: trigger-dispatcher and the decision and gate
// buckets key on the pair (decisions.go, gates.go), rule-engine's status names pairs, and the
// outcome events, which `enforcement watch` narrates, carry the name argo-syncer used.

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// objectNames are the names of a cluster's objects that one intent deals with.
type objectNames struct {
	secret, project string
	// application is "" when no enforcement was asked for.
	application string
	// legacyProject and legacyApplication say the AppProject or Application was found under its
	// legacy name; it keeps its legacy cluster_name label as well.
	legacyProject, legacyApplication bool
}

// newNames are the names new objects of cluster (and enforcement, when not "") get.
func newNames(cluster, enforcement string) objectNames {
	n := objectNames{secret: ClusterSecretName(cluster), project: ProjectName(cluster)}
	if enforcement != "" {
		n.application = events.ApplicationName(cluster, enforcement)
	}
	return n
}

// names resolves the names of the objects of cluster (and enforcement, when not "") from the
// caches: each is its new name unless an earlier version's object of this cluster exists under
// its legacy name (see the file comment). Call with the cluster's lock held.
func (s *Syncer) names(cluster, enforcement string) objectNames {
	n := newNames(cluster, enforcement)
	n.secret, _ = resolve(s.secrets, n.secret, "cluster-"+events.LegacyObjectName(cluster), cluster, "")
	n.project, n.legacyProject = resolve(s.projects, n.project, events.LegacyObjectName(cluster), cluster, "")
	if enforcement != "" {
		n.application, n.legacyApplication = resolve(s.apps, n.application, events.LegacyApplicationName(cluster, enforcement), cluster, enforcement)
	}
	return n
}

// hasApplication reports whether the view holds an Application of the cluster's enforcement,
// under its name or its legacy name.
func (s *Syncer) hasApplication(cluster, enforcement string) bool {
	_, ok, _ := s.apps.get(s.names(cluster, enforcement).application)
	return ok
}

// resolve returns the name of the object the view holds for cluster (and enforcement): name,
// unless nothing exists under it and Enforcement's object of that cluster exists under legacy;
// then legacy, and true.
func resolve[T cachedObject](v *view[T], name, legacy, cluster, enforcement string) (string, bool) {
	if legacy == name {
		return name, false
	}
	if _, ok, _ := v.get(name); ok {
		return name, false
	}
	o, ok, _ := v.get(legacy)
	if !ok || !owned(o) || annotationOf(o, AnnotationCluster) != cluster ||
		(enforcement != "" && annotationOf(o, AnnotationEnforcement) != enforcement) {
		return name, false
	}
	return legacy, true
}

// clusterLabel is the cluster_name label value of a cluster: its name when that is a valid label
// value, else the normalised object name (events.ObjectName), so that long or unusual names still
// label their objects.
func clusterLabel(cluster string) string {
	if len(validation.IsValidLabelValue(cluster)) == 0 {
		return cluster
	}
	return events.ObjectName(cluster)
}

// legacyClusterLabel is clusterLabel as versions before 64-bit suffixes wrote it; objects found
// under their legacy names keep it.
func legacyClusterLabel(cluster string) string {
	if len(validation.IsValidLabelValue(cluster)) == 0 {
		return cluster
	}
	return events.LegacyObjectName(cluster)
}

// clusterLabels are the cluster_name label values the cluster's objects may carry: one, or two
// when earlier versions wrote another.
func clusterLabels(cluster string) []string {
	return slices.Compact([]string{clusterLabel(cluster), legacyClusterLabel(cluster)})
}

// label is the cluster_name label value of an object of cluster: the legacy one for an object
// found under its legacy name.
func label(cluster string, legacy bool) string {
	if legacy {
		return legacyClusterLabel(cluster)
	}
	return clusterLabel(cluster)
}
