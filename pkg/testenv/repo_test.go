package testenv_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

func TestRepoRoot(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.work", "hack/build-tools.sh", "pkg/testenv/go.mod"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("RepoRoot() = %s, which lacks %s: %v", root, f, err)
		}
	}
}
