// Command etcd is the etcd server from go.etcd.io/etcd/server/v3, built here so tests need no
// downloaded binary. envtest starts it with its usual flags.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
