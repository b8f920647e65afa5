//go:build !linux

package zmtptransport

import (
	"net"
	"time"
)

// setUserTimeout does nothing off Linux: keepalive alone notices a peer
// gone.
func setUserTimeout(*net.TCPConn, time.Duration) {}
