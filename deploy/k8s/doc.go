// Package k8s holds Enforcement's Helm charts, one per service plus enforcement-crds for the
// ClusterRule CRD, each installed as a release of its own so that teams upgrade, scale and
// configure the services independently (design.md, "Layout").
//
// The Go code here is only the charts' tests. There is no helm binary on the development and
// CI machines, so the tests use Helm as a library (helm.sh/helm/v3, the v3.16 line that builds
// with the workspace's k8s.io v0.31 pin): they load each chart, lint it with Helm's own linter,
// render it with Helm's engine for default and non-default values, and then hand the result to
// a real kube-apiserver (pkg/testenv): a server-side dry run of every object with strict field
// validation, and a real install of the RBAC objects followed by SelfSubjectAccessReviews made
// as each service's ServiceAccount, so that "least privilege" is checked by the same authorizer
// a cluster runs, not by reading YAML.
package k8s
