package k8s

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReadmeDocumentsEveryValue: each service chart's README has a row in its values table for
// every value in values.yaml, either the value itself or the object that contains it (the
// security contexts, probes and resources are documented as a whole).
func TestReadmeDocumentsEveryValue(t *testing.T) {
	for _, name := range serviceCharts {
		t.Run(name, func(t *testing.T) {
			readme, err := os.ReadFile(filepath.Join(name, "README.md"))
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(name, "values.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var values map[string]any
			if err := yaml.Unmarshal(data, &values); err != nil {
				t.Fatal(err)
			}
			for _, path := range leafPaths(values, "") {
				if !documented(string(readme), path) {
					t.Errorf("README.md has no row for %s", path)
				}
			}
		})
	}
}

// documented reports whether the README has a table row for path or for one of its parents.
func documented(readme, path string) bool {
	for p := path; p != ""; {
		if strings.Contains(readme, "| `"+p+"` |") {
			return true
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			return false
		}
		p = p[:i]
	}
	return false
}

// leafPaths lists the dotted paths of the values that are not non-empty maps.
func leafPaths(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			out = append(out, leafPaths(sub, prefix+k+".")...)
			continue
		}
		out = append(out, prefix+k)
	}
	return out
}
