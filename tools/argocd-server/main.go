// Command argocd-server is Argo CD's API server from github.com/argoproj/argo-cd/v2, built here
// so that tests need no downloaded binary. Argo CD's own cmd/main.go picks a command by the
// binary's name and links every Argo CD component; this links only the API server.
package main

import (
	"os"

	"github.com/argoproj/argo-cd/v2/cmd/argocd-server/commands"
	"github.com/argoproj/argo-cd/v2/cmd/util"
)

func main() {
	util.SetAutoMaxProcs(false)
	if err := commands.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
