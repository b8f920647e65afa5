package main

import (
	"os"

	"github.com/gopslite/pslite/examples/internal/ctr"
)

func main() { os.Exit(ctr.Main("lr", os.Args[1:])) }
