package eks

import (
	"encoding/json"
	"testing"

	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
)

// FuzzConvert feeds Convert arbitrary DescribeCluster answers (as JSON of the SDK's cluster
// type): it never panics, and a cluster it accepts has its ARN as key and a name. Found inputs
// are kept in testdata/fuzz/FuzzConvert.
func FuzzConvert(f *testing.F) {
	for _, seed := range []string{
		`{"Name":"prod","Arn":"arn:aws:eks:eu-west-1:1:cluster/prod","Endpoint":"https://x.eks.amazonaws.com","Status":"ACTIVE","Tags":{"env":"prod"},"CertificateAuthority":{"Data":"Zm9v"},"Version":"1.31"}`,
		`{"Name":"prod"}`, `{"Arn":"a"}`, `{}`, `{"Name":"p","Arn":"a","Tags":{"":""},"Endpoint":"::"}`,
		`{"Name":"p","Arn":"a","OutpostConfig":{"ControlPlaneInstanceType":"m5"},"Id":"o-1","CreatedAt":"2024-01-01T00:00:00Z"}`,
	} {
		f.Add([]byte(seed), "")
	}
	f.Fuzz(func(t *testing.T, body []byte, roleARN string) {
		var c ekstypes.Cluster
		if json.Unmarshal(body, &c) != nil {
			return
		}
		got, err := Convert("eu-west-1", &c, roleARN)
		if err != nil {
			return
		}
		if got.Key != *c.Arn || got.Name == "" {
			t.Errorf("cluster %q (arn %q): key %q name %q", *c.Name, *c.Arn, got.Key, got.Name)
		}
	})
}
