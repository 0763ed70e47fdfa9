package checkpoint

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// The direct copies' tests on the fleet run this test binary on the hosts
// as their agent: `<binary> ck-agent recv|send JSON` does what `drover
// agent recv|send` does (launcher/agent/direct.go) around the same
// ReceiveDirect and SendDirect, so that the package's fleet needs no
// build of drover. A forged agent is a script written where the agent
// is, as a compromised login account could.
const testAgentArg = "ck-agent"

// runTestAgent is the agent's side: it returns the process's exit code.
func runTestAgent(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ck-agent recv|send JSON")
		return 2
	}
	var err error
	switch args[0] {
	case "recv":
		var o PeerRecv
		if err = json.Unmarshal([]byte(args[1]), &o); err == nil {
			err = testRecv(o, os.Stdin, os.Stdout)
		}
	case "send":
		var o PeerSend
		if err = json.Unmarshal([]byte(args[1]), &o); err == nil {
			err = testSend(o, os.Stdin, os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func testTokens(in *bufio.Reader, n int) ([][]byte, error) {
	out := make([][]byte, n)
	for i := range out {
		line, err := in.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if out[i], err = ParseToken(line); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func untilStdinEnds(in io.Reader) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	return ctx
}

func testRecv(o PeerRecv, stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	n := 1
	if o.Forward != "" {
		n = 2
	}
	tokens, err := testTokens(in, n)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Listen, "0"))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s%s\n", ListeningPrefix, ln.Addr())
	r := Receive{Listener: ln, Token: tokens[0], Own: o.Own, Seq: o.Seq, Name: o.Name, Part: o.Part, Wait: o.Wait, Idle: o.Idle,
		Events: func(format string, args ...any) {
			fmt.Fprintf(stdout, "%s%s\n", EventPrefix, fmt.Sprintf(format, args...))
		}}
	if o.Forward != "" {
		r.Next = &Forward{Addr: o.Forward, Token: tokens[1]}
	}
	digest, size, err := ReceiveDirect(untilStdinEnds(in), r)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s%s %d\n", ReceivedPrefix, digest, size)
	return nil
}

func testSend(o PeerSend, stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	tokens, err := testTokens(in, 1)
	if err != nil {
		return err
	}
	digest, size, err := SendDirect(untilStdinEnds(in), o.To, tokens[0], o.Path, o.Name, o.Rate, o.Idle)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s%s %d\n", SentPrefix, digest, size)
	return nil
}

// testPeer starts the agent at bin over a host's SSH connection; sendRate,
// when set, caps every send it starts (as checkpoint_copy_rate would).
type testPeer struct {
	tr       cluster.Transport
	bin      string
	real     string // this binary on the host
	sendRate int64
}

func (p testPeer) start(ctx context.Context, verb string, o any, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return p.tr.Start(ctx, cluster.Cmd{Args: []string{p.bin, testAgentArg, verb, string(b)}, Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

func (p testPeer) StartRecv(ctx context.Context, o PeerRecv, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error) {
	return p.start(ctx, "recv", o, stdin, stdout, stderr)
}

func (p testPeer) StartSend(ctx context.Context, o PeerSend, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error) {
	if p.sendRate > 0 {
		o.Rate = p.sendRate
	}
	return p.start(ctx, "send", o, stdin, stdout, stderr)
}

// agentOnce uploads this test binary to every fleet host once per run.
var agentOnce struct {
	sync.Once
	path []string
	err  error
}

// peerHosts is fleetHosts whose hosts run an agent (this binary) at a
// path of the test's own, ~/<wd>/agent, that a test may overwrite with a
// forged one (forgeAgent).
func peerHosts(t *testing.T) []Host {
	t.Helper()
	hosts := fleetHosts(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	agentOnce.Do(func() {
		for i, h := range hosts {
			p := fmt.Sprintf("/home/%s/.ck-test/ck.test-%d", fleettest.User, os.Getpid())
			script := fmt.Sprintf("set -e; mkdir -p %[1]q; cp %[2]q %[3]q; chown -R %[4]s %[1]q; chmod 755 %[3]q", path.Dir(p), exe, p, fleettest.User)
			if out, err := fleet.Exec(i, "sh", "-c", script); err != nil {
				agentOnce.err = fmt.Errorf("put the test agent on %s: %w: %s", h.Name, err, out)
				return
			}
			agentOnce.path = append(agentOnce.path, p)
		}
	})
	require.NoError(t, agentOnce.err)
	for i, ch := range fleet.ClusterHosts() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		tr, err := cluster.Dial(ctx, ch.Endpoint(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
		cancel()
		require.NoError(t, err)
		t.Cleanup(func() { tr.Close() })
		bin := path.Join(path.Dir(hosts[i].Dir), "agent")
		out, err := fleet.Exec(i, "sh", "-c", fmt.Sprintf("mkdir -p %[1]q && ln -sf %[2]q %[3]q && chown -R %[4]s %[1]q", path.Dir(bin), agentOnce.path[i], bin, fleettest.User))
		require.NoError(t, err, "%s", out)
		hosts[i].Addr, hosts[i].Peer = ch.Address, testPeer{tr: tr, bin: bin, real: agentOnce.path[i]}
	}
	return hosts
}

// forgeAgent writes script (a /bin/sh script; $REAL is the real agent)
// where host h's agent is, as a compromised login account could.
func forgeAgent(t *testing.T, h Host, script string) {
	t.Helper()
	p := h.Peer.(testPeer)
	bin := p.bin
	require.NoError(t, h.FS.Remove(bin))
	w, err := h.FS.Create(bin)
	require.NoError(t, err)
	_, err = fmt.Fprintf(w, "#!/bin/sh\nREAL=%q\n%s\n", p.real, script)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, h.FS.Chmod(bin, 0o755))
}

// within runs f and fails the test unless it returns within d (the copy
// hangs otherwise: the defect).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	testenv.WaitFor(t, d, what, func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}

// spamAgent is a forged agent that prints without end: events and other
// lines, never a result.
const spamAgent = `while :; do echo "event: forged"; echo "junk junk junk junk junk junk junk junk"; done`

// Issue 36, 3: the agents of h0 (the sender) and h2 (a receiver) print
// without end. The controller keeps a bounded tail, passes on at most
// maxPeerEvents of the sender's events, stops each past maxPeerOutput,
// and the copy reaches h1 and h2 through the controller. Before, the
// controller kept every line (1 GiB in 45 s) and waited for the sender
// for ever.
func TestFleetForgedAgentOutputBounded(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := peerHosts(t)
	m, ev, _ := newManager(t)
	m.idle = 3 * time.Second
	set := Settings{Copies: 3, Keep: 2}
	writeOn(t, 0, hosts[0], "step-1.pt", 1, 0)
	require.NoError(t, m.reconcile(context.Background(), hosts, set))
	forgeAgent(t, hosts[0], spamAgent)
	forgeAgent(t, hosts[2], spamAgent)
	var err error
	within(t, 45*time.Second, "the copy ends", func() { err = m.replicate(context.Background(), 1, hosts, set) })
	require.NoError(t, err)
	t.Log(truncate(ev.String(), 4000))
	assert.ElementsMatch(t, []string{"written:" + hosts[0].Name, "copy:" + hosts[1].Name, "copy:" + hosts[2].Name}, holders(m, 1))
	assert.LessOrEqual(t, strings.Count(ev.String(), hosts[0].Name+": forged"), maxPeerEvents, "at most maxPeerEvents of the sender's events")
	assert.Regexp(t, hosts[0].Name+`: \d+ more events of this copy not shown`, ev.String())
	assert.Contains(t, ev.String(), hosts[0].Name+": the agent printed more than 1048576 bytes; stopped")
	assert.Contains(t, ev.String(), hosts[2].Name+": the agent printed more than 1048576 bytes; stopped")
	assert.Less(t, len(ev.String()), 64<<10, "what the controller kept is bounded")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// stopAfterASecond is h0's agent stopped (SIGSTOP) a second into its
// copy, as an agent stuck on a failing disk looks.
const stopAfterASecond = `exec 3<&0
"$REAL" "$@" <&3 3<&- &
pid=$!
sleep 1
kill -STOP $pid
wait $pid`

// Issue 36, 7: at a restart, h0's agent sends the checkpoint h1 and h2
// lack, and stops a second into it. The receivers give up once the
// stream has not moved for the idle deadline, the controller stops the
// sender soon after, says why, and stages through itself; the next
// checkpoint goes host to host again (the pair is not marked relay-only).
// Before, the restart waited for ever.
func TestFleetStoppedSenderStage(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := peerHosts(t)
	m, ev, _ := newManager(t)
	m.idle = 3 * time.Second
	set := Settings{Copies: 2, Keep: 2}
	writeOn(t, 0, hosts[0], "step-1.pt", 32, 0)
	p := hosts[0].Peer.(testPeer)
	p.sendRate = 4 << 20 // 8 s for the copy: it is mid-stream when stopped
	hosts[0].Peer = p
	forgeAgent(t, hosts[0], stopAfterASecond)

	var paths map[string]string
	var err error
	within(t, 60*time.Second, "the restart staged", func() { paths, err = m.Stage(context.Background(), hosts, set) })
	require.NoError(t, err)
	t.Log(ev)
	want := sumOn(t, 0, path.Join(hosts[0].Dir, "step-1.pt"))
	for i := 1; i < 3; i++ {
		assert.Equal(t, want, sumOn(t, i, paths[hosts[i].Name]), "%s's copy", hosts[i].Name)
	}
	assert.Regexp(t, `(?s)direct copy of checkpoint step-1.pt \(#1\) from `+hosts[0].Name+` to `+hosts[1].Name+`, `+hosts[2].Name+` failed \(.*did not move for 3s.*\); copying through the controller instead`, ev.String())
	assert.Contains(t, ev.String(), hosts[0].Name+": still running 3s after another end of the copy ended; stopped")

	forgeAgent(t, hosts[0], `exec "$REAL" "$@"`)
	p.sendRate = 0
	hosts[0].Peer = p
	writeOn(t, 0, hosts[0], "step-2.pt", 1, 0)
	require.NoError(t, m.reconcile(context.Background(), hosts, set))
	within(t, 60*time.Second, "the next copy", func() { err = m.replicate(context.Background(), 2, hosts, set) })
	require.NoError(t, err)
	assert.Contains(t, ev.String(), "step-2.pt (#2, 1.0 MiB) copied from "+hosts[0].Name+" to ["+hosts[1].Name+"]", "%s", ev)
	assert.Contains(t, ev.String(), "(host to host: "+hosts[1].Name+")", "the pair is tried directly again")
}

// stranger is what another user of h1 runs: it watches /proc/net/tcp for
// new listening ports and opens two idle connections to each.
const stranger = `
import os, socket, sys, time
d = sys.argv[1]
def listening():
    out = set()
    for l in open('/proc/net/tcp').readlines()[1:]:
        f = l.split()
        if f[3] == '0A':
            ip, port = f[1].split(':')
            out.add(('.'.join(str(int(ip[i:i+2], 16)) for i in (6, 4, 2, 0)), int(port, 16)))
    return out
seen = listening()
held = []
open(os.path.join(d, 'ready'), 'w').close()
end = time.time() + 120
while time.time() < end and not os.path.exists(os.path.join(d, 'stop')):
    for a in listening() - seen:
        seen.add(a)
        for _ in range(2):
            try:
                held.append(socket.create_connection(a, 1))
            except OSError:
                pass
        with open(os.path.join(d, 'held'), 'a') as f:
            f.write('%s:%d\n' % a)
    time.sleep(0.001)
`

// Issue 36, 8: another Unix user of h1 opens two idle connections to each
// new listening port there. The receiver proves connections at once, each
// within a short deadline, so the sender's copy still goes host to host.
// Before, the receiver proved them one by one (10 s each) and the sender
// gave up: the pair went through the controller for good.
func TestFleetStrangerHoldsReceiverPort(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := peerHosts(t)
	m, ev, _ := newManager(t)
	set := Settings{Copies: 2, Keep: 2}
	dir, err := os.MkdirTemp("", "ck-stranger-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	ran := make(chan error, 1)
	go func() {
		out, err := fleet.Exec(1, "runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", stranger, dir)
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		ran <- err
	}()
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
		assert.NoError(t, <-ran, "the stranger's script")
	})
	testenv.WaitFor(t, 20*time.Second, "the stranger watches h1's ports", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	// The sender starts half a second after the receiver listens, as over
	// a controller's slower link: the stranger, on the host, is there
	// first.
	forgeAgent(t, hosts[0], `sleep 0.5; exec "$REAL" "$@"`)
	writeOn(t, 0, hosts[0], "step-1.pt", 8, 0)
	require.NoError(t, m.reconcile(context.Background(), hosts, set))
	within(t, 60*time.Second, "the copy", func() { err = m.replicate(context.Background(), 1, hosts, set) })
	require.NoError(t, err)
	t.Log(ev)
	held, _ := os.ReadFile(filepath.Join(dir, "held"))
	require.NotEmpty(t, held, "the stranger held connections to h1's receiver")
	assert.Contains(t, ev.String(), "(host to host: "+hosts[1].Name+")")
	assert.NotContains(t, ev.String(), "through the controller")
	assert.Equal(t, sumOn(t, 0, path.Join(hosts[0].Dir, "step-1.pt")), sumOn(t, 1, path.Join(hosts[1].Own, seqDir(1), "step-1.pt")))
}
