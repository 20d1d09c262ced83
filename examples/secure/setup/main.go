// Command setup makes examples/secure/generated: a CA, server and client
// certificates, globex's nkey, and the configuration fragments nats.conf
// includes. Run from the repository root: go run ./examples/secure/setup.
package main

import (
	"fmt"
	"os"

	"github.com/braidmq/braid/examples/secure/gen"
)

func main() {
	f, err := gen.Generate("examples/secure/generated")
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s: ca.pem, server and client certificates, globex.nk (globex's nkey %s), keys.conf, tls.conf\n", f.Dir, f.GlobexPublic)
}
