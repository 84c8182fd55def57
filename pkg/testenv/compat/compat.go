// Package compat is the compatibility suite: the manifests of the original globocom/enforcement
// operator (its example ClusterRules and Secrets, and the YAML blocks of its README) and of the
// original OCM policy-watcher, compiled into the test binaries that prove Enforcement accepts
// them unchanged and gives them the same meaning. Tests of any module read them by name, with no
// path relative to the repository:
//
//	rule := compat.Manifest(t, "enforcement/example-rancher.yaml")
//	for _, obj := range compat.Objects(t, "policy-watcher/deployment.yaml") { ... }
//
// README.md in this folder lists every manifest, where it comes from, what it proves and which
// tests use it. The files keep the upstream's apiVersion, kind, fields and values; only the
// upstream's comments are left out. TestMeaningIsPinned fails when a file's meaning drifts.
package compat

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed enforcement/*.yaml policy-watcher/*.yaml ocm/*.yaml
var suite embed.FS

// Files returns the name of every manifest of the suite, sorted, for example
// "enforcement/example-rancher.yaml". Names are slash-separated paths below this package.
func Files() []string {
	var names []string
	err := fs.WalkDir(suite, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("compat: walk embedded suite: %v", err)) // compiled in: cannot happen
	}
	slices.Sort(names)
	return names
}

// Read returns the bytes of the manifest name, as Files lists it. It fails when the suite has
// no such file, and the error lists the names it has.
func Read(name string) ([]byte, error) {
	b, err := suite.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("compat: no manifest %q in the suite (it has %s)", name, strings.Join(Files(), ", "))
	}
	return b, nil
}

// Manifest returns the bytes of the manifest name and fails t when the suite has no such file.
func Manifest(t testing.TB, name string) []byte {
	t.Helper()
	b, err := Read(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Objects decodes every YAML document of the manifest name into an unstructured object, in file
// order, skipping empty documents. It fails t when the file is missing or a document does not
// decode or lacks apiVersion or kind. Each call returns fresh objects the caller may modify.
func Objects(t testing.TB, name string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := decode(name)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// decode is Objects with an error instead of a failed test.
func decode(name string) ([]*unstructured.Unstructured, error) {
	docs, err := documents(name)
	if err != nil {
		return nil, err
	}
	objs := make([]*unstructured.Unstructured, 0, len(docs))
	for i, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("compat: decode %s, document %d: %w", name, i+1, err)
		}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			return nil, fmt.Errorf("compat: %s, document %d: apiVersion and kind are required", name, i+1)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// documents splits the manifest name into its non-empty YAML documents.
func documents(name string) ([][]byte, error) {
	b, err := Read(name)
	if err != nil {
		return nil, err
	}
	reader := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("compat: split %s: %w", name, err)
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, fmt.Errorf("compat: decode %s: %w", name, err)
		}
		if len(probe) > 0 {
			docs = append(docs, doc)
		}
	}
}
