package peerauth

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Both ends prove the token only when they share it and the scheme's
// label: a proof made for one use is refused by another.
func TestProve(t *testing.T) {
	tok := func() []byte {
		s, err := NewToken()
		require.NoError(t, err)
		b, err := ParseToken(s)
		require.NoError(t, err)
		return b
	}
	a, b := tok(), tok()
	copyS := Scheme{Label: "copy", Timeout: 5 * time.Second}
	netS := Scheme{Label: "net", Timeout: 5 * time.Second}
	for _, tc := range []struct {
		name               string
		dialTok, listenTok []byte
		dialS              Scheme
		ok                 bool
	}{
		{"same token", a, a, copyS, true},
		{"other token", b, a, copyS, false},
		{"other use", a, a, netS, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c1, c2 := net.Pipe()
			defer c1.Close()
			defer c2.Close()
			got := make(chan error, 1)
			go func() {
				err := copyS.ProveListener(c2, tc.listenTok)
				c2.Close() // a listener hangs up on a failed proof
				got <- err
			}()
			derr := tc.dialS.ProveDialer(c1, tc.dialTok)
			lerr := <-got
			if tc.ok {
				assert.NoError(t, derr)
				assert.NoError(t, lerr)
				return
			}
			assert.ErrorIs(t, derr, ErrAuth)
			assert.ErrorIs(t, lerr, ErrAuth)
		})
	}
	_, err := ParseToken("s3cret")
	assert.Error(t, err)
}
