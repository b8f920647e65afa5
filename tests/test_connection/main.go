// Command test_connection starts a node, joins the job and leaves it: the
// smallest ps-lite program.
package main

import (
	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/ps"
)

func main() {
	prog.Check(ps.Start(0), "start")
	prog.Check(ps.Finalize(0, true), "finalize")
}
