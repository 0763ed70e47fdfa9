package peerauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// TokenSize is the length of a one-time token, and of each nonce.
const TokenSize = 32

// ProofSize is how many bytes the listening end reads from a connection
// before the other end is proven: the dialler's nonce and its answer.
const ProofSize = TokenSize + sha256.Size

// NewToken returns a fresh one-time token, hex encoded as it travels on
// the agents' stdin.
func NewToken() (string, error) {
	b := make([]byte, TokenSize)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a one-time token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ParseToken reads a token line as NewToken writes it.
func ParseToken(line string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(line))
	if err != nil || len(b) != TokenSize {
		return nil, fmt.Errorf("the one-time token on stdin is not %d hex bytes", TokenSize)
	}
	return b, nil
}

// ErrAuth says the other end of a connection does not know its token.
var ErrAuth = errors.New("the other end does not know the one-time token")

// Scheme is one use of tokens: Label keeps a proof made for one use (a
// direct copy) from being taken for another (a network check), and
// Timeout bounds the whole exchange on a connection.
type Scheme struct {
	Label   string
	Timeout time.Duration
}

func (s Scheme) mac(token []byte, role string, a, b []byte) []byte {
	h := hmac.New(sha256.New, token)
	h.Write([]byte(s.Label + " " + role))
	h.Write(a)
	h.Write(b)
	return h.Sum(nil)
}

// ProveDialer is the connecting end's half: it answers the listener's
// nonce and checks the listener's answer to its own.
func (s Scheme) ProveDialer(conn net.Conn, token []byte) error {
	_ = conn.SetDeadline(time.Now().Add(s.Timeout))
	defer conn.SetDeadline(time.Time{})
	nr := make([]byte, TokenSize)
	if _, err := io.ReadFull(conn, nr); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	ns := make([]byte, TokenSize)
	if _, err := rand.Read(ns); err != nil {
		return err
	}
	if _, err := conn.Write(append(ns, s.mac(token, "send", nr, ns)...)); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, got); errors.Is(err, io.EOF) {
		// The listener hangs up on a dialler whose answer is wrong.
		return fmt.Errorf("%w (the listener hung up on its answer)", ErrAuth)
	} else if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if !hmac.Equal(got, s.mac(token, "recv", ns, nr)) {
		return ErrAuth
	}
	return nil
}

// ProveListener is the accepting end's half: it sends its nonce, reads
// exactly ProofSize bytes and, when they prove the token, answers the
// dialler's nonce.
func (s Scheme) ProveListener(conn net.Conn, token []byte) error {
	_ = conn.SetDeadline(time.Now().Add(s.Timeout))
	defer conn.SetDeadline(time.Time{})
	nr := make([]byte, TokenSize)
	if _, err := rand.Read(nr); err != nil {
		return err
	}
	if _, err := conn.Write(nr); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	in := make([]byte, ProofSize)
	if _, err := io.ReadFull(conn, in); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	ns := in[:TokenSize]
	if !hmac.Equal(in[TokenSize:], s.mac(token, "send", nr, ns)) {
		return ErrAuth
	}
	_, err := conn.Write(s.mac(token, "recv", ns, nr))
	return err
}
