package remote

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// roundTrips counts SFTP requests on a client's connection and the round
// trips they cost: a round trip starts whenever the client sends a request
// with none outstanding, that is, after it waited for every answer. A
// client that writes one packet at a time pays one per write; a pipelined
// one pays one per window of requests. Answers are delayed by a simulated
// link latency so that the count does not depend on how fast this machine
// answers.
type roundTrips struct {
	mu          sync.Mutex
	outstanding int
	trips       int
	writes      int
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips, r.writes = 0, 0
}

func (r *roundTrips) counts() (trips, writes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trips, r.writes
}

// packets splits an SFTP stream into packets (uint32 length, then the
// type byte) and calls f with each type.
type packets struct {
	buf []byte
	f   func(typ byte)
}

func (p *packets) feed(b []byte) {
	p.buf = append(p.buf, b...)
	for len(p.buf) >= 5 {
		n := int(binary.BigEndian.Uint32(p.buf))
		if len(p.buf) < 4+n {
			return
		}
		p.f(p.buf[4])
		p.buf = p.buf[4+n:]
	}
}

// toServer counts the client's requests (all but SSH_FXP_INIT).
type toServer struct {
	w io.WriteCloser
	p packets
}

func (t *toServer) Write(b []byte) (int, error) {
	t.p.feed(b)
	return t.w.Write(b)
}

func (t *toServer) Close() error { return t.w.Close() }

// fromServer counts the answers (all but SSH_FXP_VERSION), each Read after
// the latency.
type fromServer struct {
	r       io.Reader
	p       packets
	latency time.Duration
}

func (f *fromServer) Read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if n > 0 {
		time.Sleep(f.latency)
		f.p.feed(b[:n])
	}
	return n, err
}

const (
	fxpInit    = 1
	fxpVersion = 2
	fxpWrite   = 6
)

// sftpServer starts OpenSSH's sftp-server on pipes and returns a client
// made with the options every transport uses, and its counter.
func sftpServer(t *testing.T) (*sftp.Client, *roundTrips) {
	t.Helper()
	const server = "/usr/lib/openssh/sftp-server"
	if _, err := os.Stat(server); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cmd := exec.Command(server)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	rt := &roundTrips{}
	ts := &toServer{w: in, p: packets{f: func(typ byte) {
		if typ == fxpInit {
			return
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if rt.outstanding == 0 {
			rt.trips++
		}
		rt.outstanding++
		if typ == fxpWrite {
			rt.writes++
		}
	}}}
	fs := &fromServer{r: out, latency: time.Millisecond, p: packets{f: func(typ byte) {
		if typ == fxpVersion {
			return
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		rt.outstanding--
	}}}
	c, err := sftp.NewClientPipe(fs, ts, cluster.SFTPClientOptions()...)
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Close()
		in.Close()
		_ = cmd.Wait()
	})
	return c, rt
}

// clientFS is the part of cluster.FS that upload uses, over a bare client
// (the transport's FS hands out the same *sftp.File).
type clientFS struct {
	cluster.FS
	c *sftp.Client
}

func (f clientFS) Create(p string) (io.WriteCloser, error) {
	return f.c.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
}

func (f clientFS) Chmod(p string, mode fs.FileMode) error { return f.c.Chmod(p, mode) }

// The agent upload is pipelined: a few round trips per MiB, where one
// 32 KiB write per round trip (an io.Copy from a reader without a size, as
// before) costs 32 per MiB.
func TestUploadPipelined(t *testing.T) {
	c, rt := sftpServer(t)
	agentBin, err := os.Executable() // this test binary, a drover-sized file
	require.NoError(t, err)
	fi, err := os.Stat(agentBin)
	require.NoError(t, err)
	mib := float64(fi.Size()) / (1 << 20)
	dir := t.TempDir()

	rt.reset()
	dst := filepath.Join(dir, "agent")
	require.NoError(t, upload(context.Background(), clientFS{c: c}, agentBin, dst))
	trips, writes := rt.counts()
	t.Logf("upload of %.1f MiB: %d round trips (%.2f per MiB), %d writes", mib, trips, float64(trips)/mib, writes)
	assert.LessOrEqual(t, float64(trips)/mib, 4.0, "round trips per MiB")
	assert.GreaterOrEqual(t, writes, int(fi.Size()/(32<<10)), "every byte was written")
	want, err := os.ReadFile(agentBin)
	require.NoError(t, err)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "uploaded bytes differ")

	// The control: the same client, a reader that hides its size.
	rt.reset()
	f, err := os.Open(agentBin)
	require.NoError(t, err)
	defer f.Close()
	w, err := c.Create(filepath.Join(dir, "unsized"))
	require.NoError(t, err)
	_, err = io.Copy(w, struct{ io.Reader }{f})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	trips, writes = rt.counts()
	t.Logf("unsized copy: %d round trips (%.2f per MiB), %d writes", trips, float64(trips)/mib, writes)
	assert.GreaterOrEqual(t, float64(trips)/mib, 30.0, "the counter sees one round trip per write")
}
