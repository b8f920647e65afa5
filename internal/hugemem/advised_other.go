//go:build !linux

package hugemem

import "errors"

// Advised reports whether Advise took effect on b; off Linux it never does.
func Advised([]byte) (bool, error) { return false, errors.New("hugemem: no huge page advice here") }
