package k8s

import (
	"os"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestMain shares one kube-apiserver between the dry-run and RBAC tests.
func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }
