package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/crypto/bcrypt"
)

// WithAuthorization loads the accounts, users and permissions of the nats-server configuration
// file at path (such as ShippedAuthorization writes) into the server, which then refuses
// clients without a user and the subjects a user is not allowed. JetStream is available to the
// accounts the file enables it for. It fails the test when the file does not parse.
func WithAuthorization(t testing.TB, path string) NATSOption {
	t.Helper()
	if _, err := server.ProcessConfigFile(path); err != nil {
		t.Fatalf("load NATS authorization %s: %v", path, err)
	}
	return WithServerOptions(func(o *server.Options) {
		// Parsed again for every start: the server keeps state in the users it is given.
		loaded, err := server.ProcessConfigFile(path)
		if err != nil {
			panic(err) // it parsed above; the file changed under the test
		}
		o.Accounts, o.Users, o.Nkeys, o.NoAuthUser = loaded.Accounts, loaded.Users, loaded.Nkeys, loaded.NoAuthUser
		o.Authorization, o.Username, o.Password = loaded.Authorization, loaded.Username, loaded.Password
	})
}

// NATSPassword is the password ShippedAuthorization gives user.
func NATSPassword(user string) string { return "test-password-of-" + user }

// passwordVariable matches the server-environment variables deploy/nats/authorization.conf
// reads the hub users' passwords from: $RULE_ENGINE_PASSWORD is rule-engine's.
var passwordVariable = regexp.MustCompile(`\$([A-Z_]+)_PASSWORD\b`)

// ShippedAuthorization writes the repository's deploy/nats/authorization.conf completed as its
// comments tell an operator to, into a file of t.TempDir, and returns the file's path: every
// password variable defined (as NATSPassword of its user), and one policy-watcher user per
// managed cluster in clusters, made from deploy/nats/policy-watcher.conf.template with CLUSTER
// replaced by the cluster and PASSWORD_HASH by the bcrypt hash of NATSPassword("policy-watcher-"
// + cluster), pasted at the end of the accounts.
func ShippedAuthorization(t testing.TB, clusters ...string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "deploy", "nats", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	conf, tmpl := read("authorization.conf"), read("policy-watcher.conf.template")

	var clusterUsers strings.Builder
	for _, c := range clusters {
		hash, err := bcrypt.GenerateFromPassword([]byte(NATSPassword("policy-watcher-"+c)), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		clusterUsers.WriteString(strings.NewReplacer("CLUSTER", c, "PASSWORD_HASH", string(hash)).Replace(tmpl))
	}
	const end = "\n}" // the end of the accounts block, the file's last line
	i := strings.LastIndex(conf, end)
	if i < 0 {
		t.Fatalf("deploy/nats/authorization.conf: no %q closing the accounts", end)
	}
	i++
	conf = conf[:i] + clusterUsers.String() + conf[i:]

	// Variables defined at the top of the same file are what the server's environment would give.
	var vars strings.Builder
	seen := map[string]bool{}
	for _, m := range passwordVariable.FindAllStringSubmatch(conf, -1) {
		if seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		user := strings.ToLower(strings.ReplaceAll(m[1], "_", "-"))
		vars.WriteString(m[1] + "_PASSWORD: \"" + NATSPassword(user) + "\"\n")
	}
	path := filepath.Join(t.TempDir(), "authorization.conf")
	if err := os.WriteFile(path, []byte(vars.String()+conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
