package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
)

// PeerRecv is what `drover agent recv` is told: receive checkpoint Seq
// named Name into Own, listening on Listen (the host's address on the
// job's network, port chosen by the kernel), forwarding to Forward when
// set. Its one-time token (and Forward's) come on its stdin.
type PeerRecv struct {
	Own         string
	Seq         int
	Name        string
	Listen      string
	Forward     string
	Part        string
	Wait        time.Duration
	LowPriority bool
}

// PeerSend is what `drover agent send` is told: send the entry at Path as
// the checkpoint Name to the receiver at To, at most Rate bytes per
// second when positive. Its token comes on its stdin.
type PeerSend struct {
	Path        string
	Name        string
	To          string
	Rate        int64
	LowPriority bool
}

// Lines the agent's direct-copy commands print on stdout, read by
// directCopy.
const (
	ListeningPrefix = "listening "
	ReceivedPrefix  = "received "
	SentPrefix      = "sent "
	EventPrefix     = "event: "
)

// Peer starts the two ends of a direct copy on one host: drover's agent
// (the launcher runs `drover agent recv` and `send` over the transport).
type Peer interface {
	StartRecv(ctx context.Context, o PeerRecv, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error)
	StartSend(ctx context.Context, o PeerSend, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error)
}

// recvWait is how long a receiver waits for its sender (or its upstream
// hop) to connect; every connection of a chain is made at its start.
const recvWait = 20 * time.Second

// listenTimeout bounds waiting for a receiver to say where it listens.
const listenTimeout = 30 * time.Second

// peerProc is one started end: its process, its stdin (closing it stops
// the agent) and the lines it printed.
type peerProc struct {
	host  string
	proc  cluster.Process
	stdin *io.PipeWriter
	lines chan string
	err   error // from Wait
	done  chan struct{}
	last  string // the result line (received/sent)
	out   []string
	// stderr keeps the end of what the agent printed there: its error.
	stderr *cluster.TailBuffer
	// forwardFailed says a receiver reported ForwardFailed.
	forwardFailed bool
}

func startPeer(host string, start func(stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error), tokens ...string) (*peerProc, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &peerProc{host: host, stdin: inW, lines: make(chan string, 64), done: make(chan struct{}), stderr: cluster.NewTailBuffer(2 << 10)}
	proc, err := start(inR, outW, p.stderr)
	if err != nil {
		inW.Close()
		return nil, err
	}
	p.proc = proc
	go func() {
		_, _ = io.WriteString(inW, strings.Join(tokens, "\n")+"\n")
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() {
		p.err = proc.Wait()
		outW.Close()
		inR.Close()
		close(p.done)
	}()
	return p, nil
}

// stop ends the agent: its stdin closes (it gives up) and it is sent
// SIGTERM.
func (p *peerProc) stop() {
	p.stdin.Close()
	_ = p.proc.Signal(syscall.SIGTERM)
}

// listening waits for the receiver's "listening ADDR" line.
func (p *peerProc) listening(ctx context.Context) (string, error) {
	t := time.NewTimer(listenTimeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.done
				return "", fmt.Errorf("drover agent recv on %s exited before it listened: %v (%s)", p.host, p.err, strings.TrimSpace(p.stderr.String()))
			}
			if a, ok := strings.CutPrefix(l, ListeningPrefix); ok {
				return a, nil
			}
			p.out = append(p.out, l)
		case <-t.C:
			return "", fmt.Errorf("drover agent recv on %s did not listen within %s", p.host, listenTimeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// wait collects the rest of the output and the exit; events are passed
// on as they come.
func (p *peerProc) wait(events func(string, ...any)) {
	for l := range p.lines {
		if e, ok := strings.CutPrefix(l, EventPrefix); ok {
			events("%s: %s", p.host, e)
			p.forwardFailed = p.forwardFailed || strings.HasPrefix(e, ForwardFailed)
			continue
		}
		if strings.HasPrefix(l, ReceivedPrefix) || strings.HasPrefix(l, SentPrefix) {
			p.last = l
		}
		p.out = append(p.out, l)
	}
	<-p.done
}

// result parses "received|sent DIGEST SIZE".
func (p *peerProc) result() (string, int64, error) {
	if p.err != nil {
		return "", 0, fmt.Errorf("%w (%s)", p.err, strings.TrimSpace(p.stderr.String()))
	}
	f := strings.Fields(p.last)
	if len(f) != 3 {
		return "", 0, fmt.Errorf("%s: the agent printed no result (%s)", p.host, strings.Join(p.out, "; "))
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("%s: the agent's result %q: %w", p.host, p.last, err)
	}
	return f[1], size, nil
}

// directDone is one host that received a direct copy.
type directDone struct {
	host   Host
	digest string
	size   int64
}

// directCopy sends the entry at srcPath on src straight to every host of
// dests, as one chain (src -> dests[0] -> dests[1] ...), each writing
// <Own>/<seq>/<name>. It returns the hosts that hold a verified copy and
// those that do not, with why; the caller copies to those through the
// controller.
func directCopy(ctx context.Context, j directJob, dests []Host, events func(string, ...any)) ([]directDone, []Host, error) {
	src, srcPath, name := j.src, j.srcPath, j.name
	if src.Peer == nil || src.Addr == "" {
		return nil, dests, fmt.Errorf("%s runs no agent that can send", src.Name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recvs, failed, why := startChain(ctx, j, dests)
	defer func() {
		for _, r := range recvs {
			r.p.stop()
		}
	}()
	if len(recvs) == 0 {
		return nil, failed, why
	}
	send, err := startPeer(src.Name, func(in io.Reader, out, errw io.Writer) (cluster.Process, error) {
		return src.Peer.StartSend(ctx, PeerSend{Path: srcPath, Name: name, To: recvs[0].addr, Rate: j.rate, LowPriority: j.low}, in, out, errw)
	}, recvs[0].token)
	if err != nil {
		return nil, dests, fmt.Errorf("start drover agent send on %s: %w", src.Name, err)
	}
	send.wait(events)
	digest, size, err := send.result()
	if err != nil {
		return nil, dests, fmt.Errorf("send from %s to %s: %w", src.Name, recvs[0].host.Name, err)
	}
	var done []directDone
	var errs []error
	broken := false // a host before in the chain could not forward
	for _, r := range recvs {
		if broken {
			r.p.stop()
		}
		r.p.wait(events)
		broken = broken || r.p.forwardFailed
		d, n, err := r.p.result()
		if err == nil && (d != digest || n != size) {
			err = fmt.Errorf("%s received MANIFEST sha256 %s (%d bytes), sent %s (%d bytes)", r.host.Name, d, n, digest, size)
		}
		if err != nil {
			failed = append(failed, r.host)
			errs = append(errs, err)
			continue
		}
		done = append(done, directDone{host: r.host, digest: digest, size: size})
	}
	return done, failed, errors.Join(append([]error{why}, errs...)...)
}

// chainRecv is one started receiver of a chain.
type chainRecv struct {
	host  Host
	p     *peerProc
	addr  string
	token string
}

// startChain starts a receiver on every host of dests that can run one,
// the last first, so that each can be told the address of the one after
// it.
func startChain(ctx context.Context, j directJob, dests []Host) ([]chainRecv, []Host, error) {
	var chain []chainRecv
	var failed []Host
	var errs []error
	for i := len(dests) - 1; i >= 0; i-- {
		h := dests[i]
		r, err := startRecv(ctx, h, j, chain)
		if err != nil {
			failed = append(failed, h)
			errs = append(errs, err)
			continue
		}
		chain = append([]chainRecv{r}, chain...)
	}
	return chain, failed, errors.Join(errs...)
}

func startRecv(ctx context.Context, h Host, j directJob, after []chainRecv) (chainRecv, error) {
	if h.Peer == nil || h.Addr == "" {
		return chainRecv{}, fmt.Errorf("%s runs no agent that can receive", h.Name)
	}
	token, err := NewToken()
	if err != nil {
		return chainRecv{}, err
	}
	o := PeerRecv{Own: h.Own, Seq: j.seq, Name: j.name, Part: j.part, Listen: h.Addr, Wait: recvWait, LowPriority: j.low}
	tokens := []string{token}
	if len(after) > 0 {
		o.Forward = after[0].addr
		tokens = append(tokens, after[0].token)
	}
	p, err := startPeer(h.Name, func(in io.Reader, out, errw io.Writer) (cluster.Process, error) {
		return h.Peer.StartRecv(ctx, o, in, out, errw)
	}, tokens...)
	if err != nil {
		return chainRecv{}, fmt.Errorf("start drover agent recv on %s: %w", h.Name, err)
	}
	addr, err := p.listening(ctx)
	if err != nil {
		p.stop()
		return chainRecv{}, err
	}
	return chainRecv{host: h, p: p, addr: addr, token: token}, nil
}

// directJob is one direct copy: the entry at srcPath on src, checkpoint
// seq named name (part, for a part of a sharded checkpoint), read at most
// rate bytes per second (0: no cap), at low priority or not.
type directJob struct {
	src     Host
	srcPath string
	seq     int
	name    string
	part    string
	rate    int64
	low     bool
}

// dest is where the copy lands on h, as the record notes it.
func (j directJob) dest(h Host) Location {
	if j.part != "" {
		return Location{Kind: Copy, Host: h.Name, Part: j.part, Path: path.Join(partDir(h.Own, j.seq, j.part), j.name)}
	}
	return Location{Kind: Copy, Host: h.Name, Path: path.Join(h.Own, seqDir(j.seq), j.name)}
}
