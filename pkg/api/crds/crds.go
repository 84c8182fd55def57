// Package crds holds the enforcement.globo.com CustomResourceDefinitions as Go can read them: a
// copy of deploy/k8s/enforcement-crds/crds/ (go:embed cannot reach outside the module), written
// by hack/generate.sh next to the chart's files; a test keeps the two byte for byte equal.
package crds

import (
	"embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Files holds the CRD manifests, one file per CRD, named as in the enforcement-crds chart.
//
//go:embed *.yaml
var Files embed.FS

// The manifests' file names, as controller-gen writes them.
const (
	ClusterRuleFile      = "enforcement.globo.com_clusterrules.yaml"
	ClusterRuleGrantFile = "enforcement.globo.com_clusterrulegrants.yaml"
)

// ClusterRule returns the ClusterRule CRD, a fresh copy the caller may modify.
func ClusterRule() (*apiextensionsv1.CustomResourceDefinition, error) {
	return read(ClusterRuleFile)
}

// ClusterRuleGrant returns the ClusterRuleGrant CRD, a fresh copy the caller may modify.
func ClusterRuleGrant() (*apiextensionsv1.CustomResourceDefinition, error) {
	return read(ClusterRuleGrantFile)
}

// All returns every enforcement.globo.com CRD, fresh copies, ready to install.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range []string{ClusterRuleFile, ClusterRuleGrantFile} {
		crd, err := read(name)
		if err != nil {
			return nil, err
		}
		out = append(out, crd)
	}
	return out, nil
}

// read parses one embedded manifest, strictly: a field the CRD type does not know is an error.
func read(name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := Files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	if crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("%s: kind %q, want CustomResourceDefinition", name, crd.Kind)
	}
	return &crd, nil
}
