// Package peerauth proves, on a connection between two of drover's agents,
// that both ends know a one-time token the controller handed each of them
// over SSH. Direct checkpoint copies (package checkpoint) and `check net`'s
// listener (package agent) use it: an HMAC challenge in both directions,
// so the token never crosses the network and a recorded exchange cannot be
// replayed, and each end reads a fixed, small number of bytes before the
// other is proven, so a stranger that connects costs a listener a few
// dozen bytes and a deadline, never memory without end.
//
// It is a leaf: it imports only the standard library.
package peerauth
