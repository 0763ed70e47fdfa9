package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// shardDir writes a DCP-like checkpoint directory: shards, a nested
// directory and the marker.
func shardDir(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "extra", "deep"), 0o755))
	for name, size := range map[string]int{"__0_0.distcp": 3<<20 + 17, "__1_0.distcp": 1 << 20, "extra/deep/x": 5, ".metadata": 300, "empty": 0} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i*7 + len(name))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
}

func token(t *testing.T) []byte {
	t.Helper()
	s, err := NewToken()
	require.NoError(t, err)
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

type recvResult struct {
	digest string
	size   int64
	err    error
}

func receive(o Receive) chan recvResult {
	ch := make(chan recvResult, 1)
	go func() {
		d, n, err := ReceiveDirect(context.Background(), o)
		ch <- recvResult{d, n, err}
	}()
	return ch
}

// A direct copy lands as the relay's copy does: same files, same
// MANIFEST (so the same digest in the record), dated before the MANIFEST
// so that verifyCopy accepts it without reading it again; and a chain
// forwards it whole to the next host as it arrives.
func TestDirectCopyMatchesRelayAndChains(t *testing.T) {
	src := filepath.Join(t.TempDir(), "step-7")
	shardDir(t, src)
	relayOwn := t.TempDir()
	d := newDest("relay", Copy, "h9", cluster.NewOSFS("/"), relayOwn, 3, "step-7")
	want, wantSize, err := copyEntry(context.Background(), cluster.NewOSFS("/"), "h0", src, "step-7", []*dest{d}, nil, 0)
	require.NoError(t, err)

	own1, own2 := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	tok1, tok2 := token(t), token(t)
	ln1, ln2 := listen(t), listen(t)
	second := receive(Receive{Listener: ln2, Token: tok2, Own: own2, Seq: 3, Name: "step-7"})
	first := receive(Receive{Listener: ln1, Token: tok1, Own: own1, Seq: 3, Name: "step-7", Next: &Forward{Addr: ln2.Addr().String(), Token: tok2}})
	digest, size, err := SendDirect(context.Background(), ln1.Addr().String(), tok1, src, "step-7", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, want, digest, "one checkpoint, one digest, however it travelled")
	assert.Equal(t, wantSize, size)
	for _, r := range []recvResult{<-first, <-second} {
		require.NoError(t, r.err)
		assert.Equal(t, want, r.digest)
		assert.Equal(t, wantSize, r.size)
	}
	for _, own := range []string{own1, own2} {
		m, err := os.ReadFile(filepath.Join(own, seqDir(3), ManifestName))
		require.NoError(t, err)
		relayM, err := os.ReadFile(filepath.Join(relayOwn, seqDir(3), ManifestName))
		require.NoError(t, err)
		assert.Equal(t, string(relayM), string(m))
		require.NoError(t, verifyCopy(cluster.NewOSFS("/"), filepath.Join(own, seqDir(3)), want))
		sameFiles(t, filepath.Join(relayOwn, seqDir(3), "step-7"), filepath.Join(own, seqDir(3), "step-7"))
		_, err = os.Stat(filepath.Join(own, seqDir(3)+".tmp"))
		assert.ErrorIs(t, err, os.ErrNotExist)
	}
}

// A hop of a chain forwards while its own disk is busy: with h1's
// writing held at its first data frame, h2 still receives and writes
// four MiB of the stream, so a next hop never waits on this host's
// hashing, writing and fsyncs (only on recvDepth frames of them). The
// copy then completes on both.
func TestDirectCopyForwardsWhileDiskIsBusy(t *testing.T) {
	src := filepath.Join(t.TempDir(), "big.pt")
	b := make([]byte, 6<<20+5)
	for i := range b {
		b[i] = byte(i * 13)
	}
	require.NoError(t, os.WriteFile(src, b, 0o644))
	reached := make(chan struct{})
	var n atomic.Int32
	counting := func(frame byte) {
		if frame == frameData && n.Add(1) == 4 {
			close(reached)
		}
	}
	held := false
	var once sync.Once
	holding := func(frame byte) {
		if frame != frameData {
			return
		}
		once.Do(func() {
			select {
			case <-reached:
				held = true
			case <-time.After(20 * time.Second): // only ends a test that fails
			}
		})
	}
	own1, own2 := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	tok1, tok2 := token(t), token(t)
	ln1, ln2 := listen(t), listen(t)
	second := receive(Receive{Listener: ln2, Token: tok2, Own: own2, Seq: 1, Name: "big.pt", beforeApply: counting})
	first := receive(Receive{Listener: ln1, Token: tok1, Own: own1, Seq: 1, Name: "big.pt", beforeApply: holding,
		Next: &Forward{Addr: ln2.Addr().String(), Token: tok2}})
	digest, _, err := SendDirect(context.Background(), ln1.Addr().String(), tok1, src, "big.pt", 0, 0)
	require.NoError(t, err)
	for _, r := range []recvResult{<-first, <-second} {
		require.NoError(t, r.err)
		assert.Equal(t, digest, r.digest)
	}
	assert.True(t, held, "h2 got 4 MiB while h1's disk side held the first")
	for _, own := range []string{own1, own2} {
		got, err := os.ReadFile(filepath.Join(own, seqDir(1), "big.pt"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(b, got))
	}
}

// A hop passes a frame on as it arrives, not once the whole frame is in:
// with only 200 KiB of a 1 MiB data frame sent, the next hop already
// has the first 128 KiB of it.
func TestDirectCopyChainStreamsWithinAFrame(t *testing.T) {
	tok1, tok2 := token(t), token(t)
	ln1, ln2 := listen(t), listen(t)
	first := receive(Receive{Listener: ln1, Token: tok1, Own: t.TempDir(), Seq: 1, Name: "c.pt", Next: &Forward{Addr: ln2.Addr().String(), Token: tok2}})
	got := make(chan error, 1)
	go func() {
		conn, err := ln2.Accept()
		if err == nil {
			defer conn.Close()
			err = proveReceiver(conn, tok2)
		}
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // only ends a test that fails
			if _, _, err = readFrame(conn, make([]byte, 64)); err == nil {
				_, err = io.ReadFull(conn, make([]byte, 5+forwardChunk))
			}
		}
		got <- err
	}()
	conn, err := dialPeer(context.Background(), ln1.Addr().String(), tok1)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, writeFrame(conn, frameFile, []byte("c.pt")))
	head := []byte{frameData, 0, 0x10, 0, 0} // 1 MiB follows
	_, err = conn.Write(append(head, make([]byte, 200<<10)...))
	require.NoError(t, err)
	require.NoError(t, <-got, "the next hop has the frame's first 128 KiB before its last 824 KiB were sent")
	conn.Close()
	assert.Error(t, (<-first).err, "a stream cut short is refused")
}

// A receiver asks the kernel to write each 8 MiB of a file to the disk as
// it arrives, not all at the fsync after its last byte (which on a large
// host, and on every host of a chain at once, would be a long wait after
// the network is done).
func TestDirectCopyWritesBackAsItArrives(t *testing.T) {
	src := filepath.Join(t.TempDir(), "big.pt")
	require.NoError(t, os.WriteFile(src, make([]byte, 20<<20+3), 0o644))
	var mu sync.Mutex
	var ranges [][2]int64
	ended := false
	o := Receive{Listener: listen(t), Token: token(t), Own: t.TempDir(), Seq: 1, Name: "big.pt",
		beforeApply: func(frame byte) {
			mu.Lock()
			defer mu.Unlock()
			ended = ended || frame == frameEnd
		},
		writeback: func(f *os.File, off, n int64) {
			mu.Lock()
			defer mu.Unlock()
			if !ended {
				ranges = append(ranges, [2]int64{off, n})
			}
			startWriteback(f, off, n)
		}}
	got := receive(o)
	_, _, err := SendDirect(context.Background(), o.Listener.Addr().String(), o.Token, src, "big.pt", 0, 0)
	require.NoError(t, err)
	require.NoError(t, (<-got).err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, [][2]int64{{0, 8 << 20}, {8 << 20, 8 << 20}}, ranges, "written back while the file arrived")
}

// A sender that does not know the token is turned away before a byte of
// the checkpoint is written, and one that does still gets through; a
// receiver that does not know it is not sent anything.
func TestDirectCopyToken(t *testing.T) {
	src := filepath.Join(t.TempDir(), "c.pt")
	require.NoError(t, os.WriteFile(src, []byte("checkpoint"), 0o644))
	own := t.TempDir()
	tok := token(t)
	ln := listen(t)
	got := receive(Receive{Listener: ln, Token: tok, Own: own, Seq: 1, Name: "c.pt"})
	_, _, err := SendDirect(context.Background(), ln.Addr().String(), token(t), src, "c.pt", 0, 0)
	require.ErrorIs(t, err, ErrAuth)
	entries, err := os.ReadDir(own)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing written for a stranger")
	_, _, err = SendDirect(context.Background(), ln.Addr().String(), tok, src, "c.pt", 0, 0)
	require.NoError(t, err)
	r := <-got
	require.NoError(t, r.err)
	b, err := os.ReadFile(filepath.Join(own, seqDir(1), "c.pt"))
	require.NoError(t, err)
	assert.Equal(t, "checkpoint", string(b))
}

// rawSend proves the token and sends hand-made frames, as a compromised
// host could.
func rawSend(t *testing.T, addr string, tok []byte, frames ...[2]string) {
	t.Helper()
	conn, err := dialPeer(context.Background(), addr, tok)
	require.NoError(t, err)
	defer conn.Close()
	for _, f := range frames {
		require.NoError(t, writeFrame(conn, f[0][0], []byte(f[1])))
	}
	_, _, _ = readFrame(conn, make([]byte, 4<<10))
}

// A stream that names a path outside the checkpoint, or whose data does
// not match its sha256 or its MANIFEST, is refused and leaves nothing
// behind: not in drover's area, not beside it.
func TestDirectCopyRefusesBadStreams(t *testing.T) {
	sum := func(s string) string { return string(mustSum(s)) }
	for name, frames := range map[string][][2]string{
		"escape":       {{"F", "c.pt/../../evil"}, {"C", "x"}},
		"other name":   {{"F", "other"}, {"C", "x"}},
		"absolute":     {{"D", "/tmp"}},
		"bad sha256":   {{"F", "c.pt"}, {"C", "abc"}, {"E", sum("abd")}, {"M", ""}},
		"bad manifest": {{"F", "c.pt"}, {"C", "abc"}, {"E", sum("abc")}, {"M", "\"c.pt\" 3 00\n"}},
		"data first":   {{"C", "abc"}},
	} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			own := filepath.Join(parent, "own")
			tok := token(t)
			ln := listen(t)
			got := receive(Receive{Listener: ln, Token: tok, Own: own, Seq: 1, Name: "c.pt"})
			rawSend(t, ln.Addr().String(), tok, frames...)
			r := <-got
			require.Error(t, r.err)
			assert.Equal(t, "own\n", names(t, parent), "nothing beside drover's area")
			assert.Equal(t, "", names(t, own), "nothing left in it")
		})
	}
}

func mustSum(s string) []byte {
	h := sha256.New()
	h.Write([]byte(s))
	return h.Sum(nil)
}

func names(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := ""
	for _, e := range entries {
		out += e.Name() + "\n"
	}
	return out
}

// sameFiles checks that every file under want is under got with the same
// bytes, and nothing else is.
func sameFiles(t *testing.T, want, got string) {
	t.Helper()
	n := 0
	require.NoError(t, filepath.WalkDir(want, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		a, err := os.ReadFile(p)
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(got, rel))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(a, b), "%s differs", rel)
		n++
		return nil
	}))
	m := 0
	require.NoError(t, filepath.WalkDir(got, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			m++
		}
		return err
	}))
	assert.Equal(t, n, m, "the same files")
}

// Issue 36, a weak point: a sender that streams more files than a
// MANIFEST can list (its frame is at most maxManifest) is refused as soon
// as their MANIFEST would pass that bound, rather than the receiver
// keeping every path (and file) of a copy that can never complete.
func TestDirectCopyRefusesManifestThatCannotFit(t *testing.T) {
	own := t.TempDir()
	tok := token(t)
	ln := listen(t)
	got := receive(Receive{Listener: ln, Token: tok, Own: own, Seq: 1, Name: "c.pt", manifestCap: 4 << 10})
	conn, err := dialPeer(context.Background(), ln.Addr().String(), tok)
	require.NoError(t, err)
	defer conn.Close()
	long := strings.Repeat("x", 200)
	_ = writeFrame(conn, frameDir, []byte("c.pt"))
	for i := range 1000 {
		if writeFrame(conn, frameFile, []byte(fmt.Sprintf("c.pt/%04d-%s", i, long))) != nil || writeFrame(conn, frameEnd, mustSum("")) != nil {
			break
		}
	}
	r := <-got
	require.ErrorContains(t, r.err, "it can never arrive")
	entries, err := os.ReadDir(own)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing left behind")
}
