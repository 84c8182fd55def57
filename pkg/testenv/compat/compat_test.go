package compat

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// pinned is the meaning of every manifest (meaningOf: the digest of its documents as JSON, so
// comments, quoting and key order do not count), computed from the upstream files at the commits
// README.md names. A change to an apiVersion, kind, field or value changes the digest.
var pinned = map[string]string{
	"enforcement/example-rancher.yaml":                    "cfaf103e19b68dfc0b0fd0236b9eaedd381ccec08ef7fbaaa42d3ce751df9aef",
	"enforcement/example-secret.yaml":                     "049daa367334298267ed9c56573f8a2a854ca830485bceb125b8d87c41edfba8",
	"enforcement/historical-rancher-secret.yaml":          "adcf42c40f06f5e862f91f4ac2538d8e7003733691753f8f1d87f8478b557c27",
	"enforcement/historical-rancher-with-secretName.yaml": "0d999beab83d1ad9d8e898fc5f3f2a9948952c66da92d44684575559ed2c0730",
	"enforcement/readme-01-dev-rules.yaml":                "737e684ba42559b8020bd921ecc7051a41e749433299e00873704062a430556f",
	"enforcement/readme-02-dynamic-rule-jinja.yaml":       "caf91753fa337dc0c13bfff607bd3998fbf7da820c086f1755d8c261c8a25737",
	"enforcement/readme-03-dynamic-rule-requests.yaml":    "545ccfaed0a286ed6225048e9d04ca3707396924675d37651e3c24f0251ea901",
	"enforcement/readme-04-dev-rule-triggers.yaml":        "713d940b881134a31e925cbab75acd89687ce054f54235d80d3264d61746c6be",
	"enforcement/readme-05-rancher-secret.yaml":           "f543ad859d15324eff7f85e3003803f7db6d3b67b5c19d8a9b2fd6287538c97a",
	"ocm/policy-disable-mig-cluster1.yaml":                "83a45e915b943abbd26f5c930e9c92875c32cd0a54e0758cf13df4abd37c3521",
	"policy-watcher/deployment.yaml":                      "f3c41254f722a8510496c8a73d3cb273deca8506779d96ac5ad6bd4510278aa8",
}

// meaningOf returns the hex SHA-256 of the manifest's non-empty documents converted to JSON
// (object keys sorted), one per line.
func meaningOf(data []byte) (string, error) {
	reader := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	h := sha256.New()
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return "", err
		}
		if string(j) == "null" || string(j) == "{}" {
			continue
		}
		h.Write(j)
		h.Write([]byte("\n"))
	}
}

// TestMeaningIsPinned fails when a manifest is added, removed or changed in meaning without
// updating pinned (and README.md).
func TestMeaningIsPinned(t *testing.T) {
	files := Files()
	if len(files) != len(pinned) {
		t.Errorf("the suite has %d files, pinned lists %d: %v", len(files), len(pinned), files)
	}
	for _, name := range files {
		want, ok := pinned[name]
		if !ok {
			t.Errorf("%s is not pinned", name)
			continue
		}
		got, err := meaningOf(Manifest(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s means something else than upstream: digest %s, want %s", name, got, want)
		}
	}
}

// TestObjectsDecodeEveryDocument checks the documents and kinds each manifest decodes to.
func TestObjectsDecodeEveryDocument(t *testing.T) {
	kinds := func(name string) string {
		var ks []string
		for _, o := range Objects(t, name) {
			ks = append(ks, o.GetKind())
		}
		return strings.Join(ks, ",")
	}
	for name, want := range map[string]string{
		"enforcement/example-rancher.yaml":          "ClusterRule",
		"enforcement/readme-05-rancher-secret.yaml": "Secret",
		"policy-watcher/deployment.yaml":            "ClusterRole,ServiceAccount,ClusterRoleBinding,Deployment,ClusterClaim",
		"ocm/policy-disable-mig-cluster1.yaml":      "Policy",
	} {
		if got := kinds(name); got != want {
			t.Errorf("%s decodes to %s, want %s", name, got, want)
		}
	}
	a, b := Objects(t, "enforcement/example-rancher.yaml")[0], Objects(t, "enforcement/example-rancher.yaml")[0]
	a.SetName("changed")
	if b.GetName() != "dev-rule" {
		t.Errorf("Objects shares objects between calls: second call sees name %q", b.GetName())
	}
}

// TestUnknownManifestIsAClearError checks that a wrong name names the files there are.
func TestUnknownManifestIsAClearError(t *testing.T) {
	_, err := Read("enforcement/no-such.yaml")
	if err == nil {
		t.Fatal("Read of a missing manifest succeeded")
	}
	for _, want := range []string{`"enforcement/no-such.yaml"`, "enforcement/example-rancher.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := decode("enforcement/no-such.yaml"); err == nil {
		t.Error("decode of a missing manifest succeeded")
	}
}
