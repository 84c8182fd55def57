package testenv_test

import (
	"os"
	"testing"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// The package dogfoods the shared API server: every test that calls SharedKube uses one.
func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }
