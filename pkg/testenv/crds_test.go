package testenv_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// crdSources says where each file under crds/ was copied from. Every file must be listed and
// equal, byte for byte, to its source in the module cache.
var crdSources = []struct {
	file, module, path string
}{
	{"crds/argocd/application-crd.yaml", "github.com/argoproj/argo-cd/v2@v2.14.21", "manifests/crds/application-crd.yaml"},
	{"crds/argocd/applicationset-crd.yaml", "github.com/argoproj/argo-cd/v2@v2.14.21", "manifests/crds/applicationset-crd.yaml"},
	{"crds/argocd/appproject-crd.yaml", "github.com/argoproj/argo-cd/v2@v2.14.21", "manifests/crds/appproject-crd.yaml"},
	{"crds/ocm/0000_02_clusters.open-cluster-management.io_clusterclaims.crd.yaml", "open-cluster-management.io/api@v0.16.1", "cluster/v1alpha1/0000_02_clusters.open-cluster-management.io_clusterclaims.crd.yaml"},
	{"crds/ocm/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml", "open-cluster-management.io/api@v0.16.1", "cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml"},
	{"crds/ocm/policy.open-cluster-management.io_policies.yaml", "open-cluster-management.io/governance-policy-propagator@v0.16.0", "deploy/crds/policy.open-cluster-management.io_policies.yaml"},
	{"crds/clusterinventory/multicluster.x-k8s.io_clusterprofiles.yaml", "sigs.k8s.io/cluster-inventory-api@v0.1.2", "config/crd/bases/multicluster.x-k8s.io_clusterprofiles.yaml"},
}

// TestCRDsMatchUpstream fails when a copied CRD differs from the pinned module's file, or when a
// file under crds/ has no recorded source. It downloads the modules through the Go module proxy
// (or uses the module cache).
func TestCRDsMatchUpstream(t *testing.T) {
	moduleDirs := map[string]string{}
	for _, src := range crdSources {
		if _, ok := moduleDirs[src.module]; !ok {
			moduleDirs[src.module] = moduleDir(t, src.module)
		}
		want, err := os.ReadFile(filepath.Join(moduleDirs[src.module], src.path))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(src.file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s/%s; copy it again", src.file, src.module, src.path)
		}
	}

	var files []string
	err := filepath.WalkDir("crds", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, filepath.ToSlash(path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.ContainsFunc(crdSources, func(s struct{ file, module, path string }) bool { return s.file == f }) {
			t.Errorf("%s has no source in crdSources", f)
		}
	}
}

// moduleDir returns the module cache directory of module@version, downloading it if needed.
func moduleDir(t *testing.T, moduleAtVersion string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", moduleAtVersion).Output()
	var info struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(out, &info); jsonErr != nil || err != nil || info.Error != "" {
		t.Fatalf("go mod download %s: %v %s", moduleAtVersion, err, info.Error)
	}
	return info.Dir
}

// The embedded CRDs parse into exactly the kinds the project relies on.
func TestEmbeddedCRDKinds(t *testing.T) {
	for name, tc := range map[string]struct {
		crds []*apiextensionsv1.CustomResourceDefinition
		want []string
	}{
		"argocd": {testenv.ArgoCDCRDs(), []string{"argoproj.io/AppProject", "argoproj.io/Application", "argoproj.io/ApplicationSet"}},
		"ocm": {testenv.OCMCRDs(), []string{
			"cluster.open-cluster-management.io/ClusterClaim",
			"cluster.open-cluster-management.io/ManagedCluster",
			"policy.open-cluster-management.io/Policy",
		}},
		"clusterinventory": {testenv.ClusterProfileCRDs(), []string{"multicluster.x-k8s.io/ClusterProfile"}},
	} {
		var got []string
		for _, crd := range tc.crds {
			got = append(got, crd.Spec.Group+"/"+crd.Spec.Names.Kind)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s CRDs = %v, want %v", name, got, tc.want)
		}
	}

	// Callers get their own copies.
	testenv.ArgoCDCRDs()[0].Spec.Group = "changed"
	if testenv.ArgoCDCRDs()[0].Spec.Group == "changed" {
		t.Error("ArgoCDCRDs returns shared objects")
	}
}
