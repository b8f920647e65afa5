// Command pskeygen prints a fresh CURVE key pair for a job, as environment
// assignments to give every node:
//
//	eval "$(go run github.com/gopslite/pslite/cmd/pskeygen)"
//	scripts/local.sh 2 2 build/test_kv_app
package main

import (
	"fmt"
	"os"

	"github.com/gopslite/pslite/van"
)

func main() {
	k, err := van.NewCurveKeys()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("export PS_CURVE_PUBLIC_KEY='%s'\nexport PS_CURVE_SECRET_KEY='%s'\n", k.Public, k.Secret)
}
