// Package tests holds the ps-lite test programs (one main package per
// directory, built into build/ by `make build` and launched with
// scripts/local.sh) and the integration tests that run them as real
// clusters of processes.
package tests
