// Command etcd is etcd's own server entry point (go.etcd.io/etcd/server/v3),
// wrapped in our module because the etcd main package lives in a module
// (go.etcd.io/etcd/v3) that pulls in etcdctl/etcdutl and their test tooling.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
