package main

import (
	"os"

	"github.com/gopslite/pslite/examples/internal/ctr"
)

func main() { os.Exit(ctr.Main("fm", os.Args[1:])) }
