//go:build !linux

package cluster

import "net"

// quickAck is Linux-only (TCP_QUICKACK); elsewhere conn is used as it is.
func quickAck(conn net.Conn) net.Conn { return conn }
