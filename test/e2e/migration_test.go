package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// originalClusterSecret is the cluster Secret Argo CD stored when the original operator
// registered a cluster through its API: Argo CD's own name (cluster-<host>-<hash>), its
// secret-type label and managed-by annotation, and no label of Enforcement. The original did not
// verify the cluster's TLS certificate.
func originalClusterSecret(cluster, server string) *corev1.Secret {
	config, _ := json.Marshal(map[string]any{"bearerToken": token, "tlsClientConfig": map[string]any{"insecure": true}})
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-127.0.0.1-3396615958", Namespace: argoNS,
			Labels:      map[string]string{"argocd.argoproj.io/secret-type": "cluster"},
			Annotations: map[string]string{"managed-by": "argocd.argoproj.io"}},
		Data: map[string][]byte{"name": []byte(cluster), "server": []byte(server), "config": config},
	}
}

// originalApplication is an Application the original operator created through the Argo CD API
// (its app/data/argo/application.py): "<cluster>-<enforcement>", label cluster_name only, the
// project Argo CD defaults to, destination by cluster name, one source, automated sync with
// prune and self-heal.
func originalApplication(cluster, enforcement, path string, params map[string]string) *unstructured.Unstructured {
	source := map[string]any{"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": path}
	if len(params) > 0 {
		var list []any
		for k, v := range params {
			list = append(list, map[string]any{"name": k, "value": v})
		}
		source["helm"] = map[string]any{"parameters": list}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": cluster + "-" + enforcement, "namespace": argoNS,
			"labels": map[string]any{"cluster_name": cluster}},
		"spec": map[string]any{
			"project":     "default",
			"destination": map[string]any{"name": cluster, "namespace": "default"},
			"source":      source,
			"syncPolicy":  map[string]any{"automated": map[string]any{"prune": true, "selfHeal": true}},
		},
	}}
}

// originalProject is the AppProject the original operator created for a cluster (project.py): no
// labels, the cluster's server as its only destination, every repository.
func originalProject(cluster, server string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": cluster, "namespace": argoNS},
		"spec": map[string]any{
			"sourceRepos":  []any{"*"},
			"destinations": []any{map[string]any{"server": server, "namespace": "*"}},
		},
	}}
}

// TestMigrationAdoptsTheOriginalsObjects is the migration from globocom/enforcement: a cluster
// the original operator served (its cluster Secret, its AppProject and the two Applications of
// example-rancher.yaml, as the original named and labelled them) meets the whole pipeline,
// with the original's rule applied unchanged and its source Secret's keys. Enforcement adopts
// the AppProject and the Applications in place (same UIDs, the adoption record, no Application
// created), leaves the original's cluster Secret as the registration (no second Secret for the
// server), installs a new cluster of the fleet as usual, and nothing is duplicated.
func TestMigrationAdoptsTheOriginalsObjects(t *testing.T) {
	var server string
	uids := map[string]string{}
	s := newSystemWith(t, nil, natsSingle, func(s *system) {
		ctx := context.Background()
		s.rancher.SetClusters(gke("c-1", "prod-a", "active", norman), gke("c-2", "prod-b", "active", norman))
		server = s.rancher.URL + "/k8s/clusters/c-1"
		if err := s.kube.Client.Create(ctx, originalClusterSecret("prod-a", server)); err != nil {
			t.Fatal(err)
		}
		for _, o := range []*unstructured.Unstructured{
			originalProject("prod-a", server),
			originalApplication("prod-a", "guestbook", "guestbook", nil),
			originalApplication("prod-a", "helm-guestbook", "helm-guestbook", map[string]string{"replicaCount": "1"}),
		} {
			gvr := gvrApplication
			if o.GetKind() == "AppProject" {
				gvr = gvrAppProject
			}
			got, err := s.dyn.Resource(gvr).Namespace(argoNS).Create(ctx, o, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create the original's %s %s: %v", o.GetKind(), o.GetName(), err)
			}
			uids[got.GetKind()+"/"+got.GetName()] = string(got.GetUID())
		}
	})
	s.applyRule(operatorNS, example(t, "example-rancher.yaml"))

	apps := []string{"prod-a-guestbook", "prod-a-helm-guestbook", "prod-b-guestbook", "prod-b-helm-guestbook"}
	testenv.Eventually(t, 90*time.Second, func() error {
		if err := s.holds(apps, []string{"prod-a", "prod-b"}, []string{"prod-a", "prod-b"}); err != nil {
			return err
		}
		for _, name := range []string{"Application/prod-a-guestbook", "Application/prod-a-helm-guestbook", "AppProject/prod-a"} {
			gvr, obj := gvrApplication, name[len("Application/"):]
			if name[:len("AppProject")] == "AppProject" {
				gvr, obj = gvrAppProject, name[len("AppProject/"):]
			}
			u := s.get(gvr, obj)
			if u.GetLabels()["app.kubernetes.io/managed-by"] != "enforcement" {
				return fmt.Errorf("%s not adopted yet: labels %v", name, u.GetLabels())
			}
			if string(u.GetUID()) != uids[name] {
				return fmt.Errorf("%s was replaced (uid %s, the original's %s)", name, u.GetUID(), uids[name])
			}
			if u.GetAnnotations()["enforcement.globo.com/adopted-from"] != "globocom/enforcement" {
				return fmt.Errorf("%s lacks the adoption record: %v", name, u.GetAnnotations())
			}
		}
		return nil
	})
	// The adopted Applications are now exactly what the rule renders, in the cluster's project.
	checkApplication(t, s.get(gvrApplication, "prod-a-helm-guestbook"), "prod-a", "default",
		"https://github.com/argoproj/argocd-example-apps", "helm-guestbook", map[string]string{"replicaCount": "1"})
	checkApplication(t, s.get(gvrApplication, "prod-a-guestbook"), "prod-a", "default",
		"https://github.com/argoproj/argocd-example-apps", "guestbook", nil)

	// One cluster Secret per server: the original's registration of prod-a is the one in use, left
	// as Argo CD stored it.
	list, err := s.dyn.Resource(gvrSecret).Namespace(argoNS).List(context.Background(), listBySecretType)
	if err != nil {
		t.Fatal(err)
	}
	perServer := map[string][]string{}
	for _, i := range list.Items {
		data, _, _ := unstructured.NestedStringMap(i.Object, "data")
		perServer[decodeB64(data["server"])] = append(perServer[decodeB64(data["server"])], i.GetName())
	}
	if got := perServer[server]; len(got) != 1 || got[0] != "cluster-127.0.0.1-3396615958" {
		t.Errorf("cluster Secrets for prod-a's server: %v, want only the original's", got)
	}
	for srv, names := range perServer {
		if len(names) != 1 {
			t.Errorf("server %s has %d cluster Secrets: %v", srv, len(names), names)
		}
	}

	// The stream tells the same: prod-a's installs succeeded without creating anything, prod-b's
	// created their Applications, and no Application was created twice.
	created := map[string]bool{}
	for _, e := range s.audit() {
		if ok, is := e.(*events.InstallSucceeded); is {
			created[ok.Application] = created[ok.Application] || ok.Created
		}
	}
	if created["prod-a-guestbook"] || created["prod-a-helm-guestbook"] || !created["prod-b-guestbook"] || !created["prod-b-helm-guestbook"] {
		t.Errorf("Applications reported created: %v, want prod-b's only", created)
	}
	checkNoDuplicates(t, s)
}
