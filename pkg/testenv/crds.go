package testenv

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"path"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// crdFiles holds the upstream CRD manifests, copied byte for byte from the module versions the
// design pins (see crds_test.go for the sources and the drift check):
//
//	crds/argocd  github.com/argoproj/argo-cd/v2@v2.14.21 manifests/crds
//	crds/ocm     open-cluster-management.io/api@v0.16.1 (ClusterClaim, ManagedCluster) and
//	             open-cluster-management.io/governance-policy-propagator@v0.16.0 (Policy)
//	crds/clusterinventory  sigs.k8s.io/cluster-inventory-api@v0.1.2 config/crd/bases (ClusterProfile)
//
//go:embed crds/argocd/*.yaml crds/ocm/*.yaml crds/clusterinventory/*.yaml
var crdFiles embed.FS

// ArgoCDCRDs returns Argo CD's Application, AppProject and ApplicationSet CRDs (argoproj.io
// v1alpha1) from Argo CD v2.14.21. Each call returns fresh copies that the caller may modify.
// Install them with (*Kube).InstallCRDs or WithCRDs.
func ArgoCDCRDs() []*apiextensionsv1.CustomResourceDefinition {
	return deepCopyCRDs(argoCDCRDs())
}

// OCMCRDs returns Open Cluster Management's ClusterClaim (cluster.open-cluster-management.io
// v1alpha1), ManagedCluster (cluster.open-cluster-management.io v1) and Policy
// (policy.open-cluster-management.io v1) CRDs from api v0.16.1 and governance-policy-propagator
// v0.16.0. Each call returns fresh copies that the caller may modify.
func OCMCRDs() []*apiextensionsv1.CustomResourceDefinition {
	return deepCopyCRDs(ocmCRDs())
}

// ClusterProfileCRDs returns the sig-multicluster Cluster Inventory API's ClusterProfile CRD
// (multicluster.x-k8s.io v1alpha1) from cluster-inventory-api v0.1.2. Each call returns fresh
// copies that the caller may modify.
func ClusterProfileCRDs() []*apiextensionsv1.CustomResourceDefinition {
	return deepCopyCRDs(clusterProfileCRDs())
}

// The embedded files are parsed once per process: the ApplicationSet CRD alone is 1 MB of YAML.
var (
	argoCDCRDs = sync.OnceValue(func() []*apiextensionsv1.CustomResourceDefinition { return mustParseCRDDir("crds/argocd") })
	ocmCRDs    = sync.OnceValue(func() []*apiextensionsv1.CustomResourceDefinition { return mustParseCRDDir("crds/ocm") })

	clusterProfileCRDs = sync.OnceValue(func() []*apiextensionsv1.CustomResourceDefinition {
		return mustParseCRDDir("crds/clusterinventory")
	})
)

// mustParseCRDDir parses every embedded YAML file in dir. It panics on error, since the files are
// compiled in and a test proves they parse.
func mustParseCRDDir(dir string) []*apiextensionsv1.CustomResourceDefinition {
	entries, err := crdFiles.ReadDir(dir)
	if err != nil {
		panic(fmt.Sprintf("testenv: read embedded %s: %v", dir, err))
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, e := range entries {
		data, err := crdFiles.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			panic(fmt.Sprintf("testenv: read embedded %s: %v", e.Name(), err))
		}
		parsed, err := parseCRDs(data)
		if err != nil {
			panic(fmt.Sprintf("testenv: parse embedded %s: %v", e.Name(), err))
		}
		crds = append(crds, parsed...)
	}
	return crds
}

// parseCRDs decodes every non-empty YAML document in data as a CustomResourceDefinition and
// fails on any document of another kind.
func parseCRDs(data []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	reader := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var crds []*apiextensionsv1.CustomResourceDefinition
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return crds, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(doc, crd); err != nil {
			return nil, err
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("document of kind %q, want CustomResourceDefinition", crd.Kind)
		}
		crds = append(crds, crd)
	}
}

func deepCopyCRDs(in []*apiextensionsv1.CustomResourceDefinition) []*apiextensionsv1.CustomResourceDefinition {
	out := make([]*apiextensionsv1.CustomResourceDefinition, len(in))
	for i, crd := range in {
		out[i] = crd.DeepCopy()
	}
	return out
}
