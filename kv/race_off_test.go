//go:build !race

package kv_test

// raceOn says that the race detector is on: tests that move many bytes do
// fewer rounds under it (it makes them several times slower).
const raceOn = false
