package checkpoint

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
)

// PeerRecv is what `drover agent recv` is told: receive checkpoint Seq
// named Name into Own, listening on Listen (the host's address on the
// job's network, port chosen by the kernel), forwarding to Forward when
// set. Its one-time token (and Forward's) come on its stdin.
type PeerRecv struct {
	Own     string
	Seq     int
	Name    string
	Listen  string
	Forward string
	Part    string
	Wait    time.Duration
	// Idle is the stream's idle deadline (CopyIdle when 0).
	Idle        time.Duration
	LowPriority bool
}

// PeerSend is what `drover agent send` is told: send the entry at Path as
// the checkpoint Name to the receiver at To, at most Rate bytes per
// second when positive. Its token comes on its stdin.
type PeerSend struct {
	Path string
	Name string
	To   string
	Rate int64
	// Idle is the stream's idle deadline (CopyIdle when 0).
	Idle        time.Duration
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

// Bounds on what the controller keeps of an end's stdout: the agent on a
// host may be replaced by anything that prints (the threat model), and
// the controller must not grow with it.
const (
	// maxPeerLine is the longest line kept whole; the rest is dropped.
	maxPeerLine = 4 << 10
	// maxPeerOutput is how much an end may print in all (an honest one
	// prints a few lines): past it, the command is stopped and fails.
	maxPeerOutput = 1 << 20
	// maxPeerEvents is how many events of one end are passed on; the
	// rest are counted in one last event.
	maxPeerEvents = 16
	// peerTail is how many other lines are kept, the last ones, for the
	// error that names what went wrong.
	peerTail = 8
)

// peerProc is one started end: its process, its stdin (closing it stops
// the agent) and the lines it printed.
type peerProc struct {
	host   string
	proc   cluster.Process
	cancel context.CancelFunc // closes the command's channel
	stdin  *io.PipeWriter
	lines  chan string
	err    error // from Wait
	done   chan struct{}
	last   string // the result line (received/sent)
	out    []string
	// stderr keeps the end of what the agent printed there: its error.
	stderr *cluster.TailBuffer
	// forwardFailed says a receiver reported ForwardFailed, and
	// nextUnreachable that it could not connect to the next hop at all;
	// unreachable says a sender could not connect to its receiver.
	forwardFailed, nextUnreachable, unreachable bool
	events                                      int
	// overflow says the end printed more than maxPeerOutput; killed
	// why the controller stopped waiting for it.
	overflow atomic.Bool
	killed   string
}

func startPeer(ctx context.Context, host string, start func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error), tokens ...string) (*peerProc, error) {
	ctx, cancel := context.WithCancel(ctx)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &peerProc{host: host, cancel: cancel, stdin: inW, lines: make(chan string, 64), done: make(chan struct{}), stderr: cluster.NewTailBuffer(2 << 10)}
	proc, err := start(ctx, inR, outW, p.stderr)
	if err != nil {
		cancel()
		inW.Close()
		return nil, err
	}
	p.proc = proc
	go func() {
		_, _ = io.WriteString(inW, strings.Join(tokens, "\n")+"\n")
	}()
	go p.readLines(outR)
	go func() {
		p.err = proc.Wait()
		outW.Close()
		inR.Close()
		close(p.done)
	}()
	return p, nil
}

// readLines passes the end's stdout on as lines, each cut at
// maxPeerLine, and stops the command once it printed maxPeerOutput.
func (p *peerProc) readLines(out io.Reader) {
	defer close(p.lines)
	lim := &io.LimitedReader{R: out, N: maxPeerOutput}
	br := bufio.NewReaderSize(lim, maxPeerLine)
	for {
		line, cut, err := br.ReadLine()
		if err != nil {
			break
		}
		l := string(line)
		for cut && err == nil {
			_, cut, err = br.ReadLine()
		}
		p.lines <- l
	}
	if lim.N <= 0 {
		p.overflow.Store(true)
		p.kill()
		_, _ = io.Copy(io.Discard, out)
	}
}

// stop ends the agent: its stdin closes (it gives up) and it is sent
// SIGTERM, and SIGCONT, so that a stopped one gets it.
func (p *peerProc) stop() {
	p.stdin.Close()
	_ = p.proc.Signal(syscall.SIGTERM)
	_ = p.proc.Signal(syscall.SIGCONT)
}

// kill stops the agent and closes its channel: Wait returns even when
// the host does not end it.
func (p *peerProc) kill() {
	p.stop()
	p.cancel()
}

// drain reads what is left of the end's output, for an end nobody waits
// for any more: its output, and so its exit, are never held up.
func (p *peerProc) drain() {
	go func() {
		for range p.lines {
		}
	}()
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
				return "", fmt.Errorf("drover agent recv on %s exited before it listened: %v (%s)", p.host, p.failure(), strings.TrimSpace(p.stderr.String()))
			}
			if a, ok := strings.CutPrefix(l, ListeningPrefix); ok {
				return a, nil
			}
			p.keep(l)
		case <-t.C:
			return "", fmt.Errorf("drover agent recv on %s did not listen within %s", p.host, listenTimeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// keep notes a line that is neither a result nor an event, keeping the
// last peerTail.
func (p *peerProc) keep(l string) {
	if len(p.out) == peerTail {
		p.out = append(p.out[:0], p.out[1:]...)
	}
	p.out = append(p.out, l)
}

// wait collects the rest of the output and the exit; events are passed
// on as they come, at most maxPeerEvents of them.
func (p *peerProc) wait(events func(string, ...any)) {
	for l := range p.lines {
		if e, ok := strings.CutPrefix(l, EventPrefix); ok {
			p.event(e, events)
			continue
		}
		if strings.HasPrefix(l, ReceivedPrefix) || strings.HasPrefix(l, SentPrefix) {
			p.last = l
			continue
		}
		p.keep(l)
	}
	<-p.done
	if p.events > maxPeerEvents {
		events("%s: %d more events of this copy not shown", p.host, p.events-maxPeerEvents)
	}
}

func (p *peerProc) event(e string, events func(string, ...any)) {
	p.events++
	if p.events <= maxPeerEvents {
		events("%s: %s", p.host, e)
	}
	if f, ok := strings.CutPrefix(e, ForwardFailed); ok {
		p.forwardFailed = true
		p.nextUnreachable = p.nextUnreachable || strings.HasPrefix(f, ": "+Unreachable)
	}
	p.unreachable = p.unreachable || strings.HasPrefix(e, Unreachable)
}

// failure is why the end failed, as far as the controller knows: its
// exit, or why the controller stopped it.
func (p *peerProc) failure() error {
	switch {
	case p.overflow.Load():
		return fmt.Errorf("%s: the agent printed more than %d bytes; stopped", p.host, maxPeerOutput)
	case p.killed != "":
		return fmt.Errorf("%s: %s; stopped", p.host, p.killed)
	}
	return p.err
}

// succeeded reports whether the end exited 0 with a result line.
func (p *peerProc) succeeded() bool {
	return p.failure() == nil && p.last != ""
}

// result parses "received|sent DIGEST SIZE".
func (p *peerProc) result() (string, int64, error) {
	if err := p.failure(); err != nil {
		if e := strings.TrimSpace(p.stderr.String()); e != "" {
			return "", 0, fmt.Errorf("%w (%s)", err, e)
		}
		return "", 0, err
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

// waitChain waits for every end of a chain (the sender first, then the
// receivers in order) to end, passing their events on. An end that
// reports it could not forward has the receivers after it stopped. Once
// one end has ended, the others have grace to: each honest end gives up
// on a stream that does not move for its idle deadline, so one still
// running past that is stopped or not drover's agent, and is killed.
func waitChain(ends []*peerProc, grace time.Duration, events func(string, ...any)) {
	ended := make(chan int, len(ends))
	for i, p := range ends {
		go func() {
			p.wait(events)
			ended <- i
		}()
	}
	var late <-chan time.Time
	gone := make([]bool, len(ends))
	for left := len(ends); left > 0; {
		select {
		case i := <-ended:
			left--
			gone[i] = true
			if i == 0 && !ends[0].succeeded() {
				// The sender failed: the receivers wait for nothing.
				for _, q := range ends[1:] {
					q.stop()
				}
			}
			if ends[i].forwardFailed {
				for _, q := range ends[i+1:] {
					q.stop()
				}
			}
			if late == nil {
				t := time.NewTimer(grace)
				defer t.Stop()
				late = t.C
			}
		case <-late:
			for i, p := range ends {
				if !gone[i] {
					p.killed = fmt.Sprintf("still running %s after another end of the copy ended", grace)
					p.kill()
				}
			}
		}
	}
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
// those that do not, with why, and of those the ones that could not be
// connected to at all; the caller copies to the failed ones through the
// controller.
func directCopy(ctx context.Context, j directJob, dests []Host, events func(string, ...any)) (done []directDone, failed, unreachable []Host, why error) {
	src, srcPath, name := j.src, j.srcPath, j.name
	if src.Peer == nil || src.Addr == "" {
		return nil, dests, nil, fmt.Errorf("%s runs no agent that can send", src.Name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recvs, failed, why := startChain(ctx, j, dests)
	waited := false
	defer func() {
		for _, r := range recvs {
			r.p.stop()
			if !waited {
				r.p.drain()
			}
		}
	}()
	if len(recvs) == 0 {
		return nil, failed, nil, why
	}
	send, err := startPeer(ctx, src.Name, func(ctx context.Context, in io.Reader, out, errw io.Writer) (cluster.Process, error) {
		return src.Peer.StartSend(ctx, PeerSend{Path: srcPath, Name: name, To: recvs[0].addr, Rate: j.rate, Idle: j.idle, LowPriority: j.low}, in, out, errw)
	}, recvs[0].token)
	if err != nil {
		return nil, dests, nil, fmt.Errorf("start drover agent send on %s: %w", src.Name, err)
	}
	ends := []*peerProc{send}
	for _, r := range recvs {
		ends = append(ends, r.p)
	}
	waitChain(ends, j.idleOr(), events)
	waited = true
	digest, size, err := send.result()
	if err != nil {
		if send.unreachable {
			unreachable = append(unreachable, recvs[0].host)
		}
		errs := []error{why, fmt.Errorf("send from %s to %s: %w", src.Name, recvs[0].host.Name, err)}
		for _, r := range recvs {
			if _, _, err := r.p.result(); err != nil && send.killed != "" {
				errs = append(errs, err) // why the controller gave up on the sender
			}
		}
		return nil, dests, unreachable, joinErrs(errs...)
	}
	var errs []error
	for i, r := range recvs {
		d, n, err := r.p.result()
		if err == nil && (d != digest || n != size) {
			err = fmt.Errorf("%s received MANIFEST sha256 %s (%d bytes), sent %s (%d bytes)", r.host.Name, d, n, digest, size)
		}
		if r.p.nextUnreachable && i+1 < len(recvs) {
			unreachable = append(unreachable, recvs[i+1].host)
		}
		if err != nil {
			failed = append(failed, r.host)
			errs = append(errs, err)
			continue
		}
		done = append(done, directDone{host: r.host, digest: digest, size: size})
	}
	return done, failed, unreachable, joinErrs(append([]error{why}, errs...)...)
}

// joinedErrs is errors.Join on one line ("; "): it ends up in one event.
type joinedErrs []error

func (e joinedErrs) Error() string {
	var b strings.Builder
	for i, err := range e {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e joinedErrs) Unwrap() []error { return e }

// joinErrs joins the errors that are not nil, nil when none is.
func joinErrs(errs ...error) error {
	var out joinedErrs
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
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
	return chain, failed, joinErrs(errs...)
}

func startRecv(ctx context.Context, h Host, j directJob, after []chainRecv) (chainRecv, error) {
	if h.Peer == nil || h.Addr == "" {
		return chainRecv{}, fmt.Errorf("%s runs no agent that can receive", h.Name)
	}
	token, err := NewToken()
	if err != nil {
		return chainRecv{}, err
	}
	o := PeerRecv{Own: h.Own, Seq: j.seq, Name: j.name, Part: j.part, Listen: h.Addr, Wait: recvWait, Idle: j.idle, LowPriority: j.low}
	tokens := []string{token}
	if len(after) > 0 {
		o.Forward = after[0].addr
		tokens = append(tokens, after[0].token)
	}
	p, err := startPeer(ctx, h.Name, func(ctx context.Context, in io.Reader, out, errw io.Writer) (cluster.Process, error) {
		return h.Peer.StartRecv(ctx, o, in, out, errw)
	}, tokens...)
	if err != nil {
		return chainRecv{}, fmt.Errorf("start drover agent recv on %s: %w", h.Name, err)
	}
	addr, err := p.listening(ctx)
	if err != nil {
		p.kill()
		p.drain()
		return chainRecv{}, err
	}
	return chainRecv{host: h, p: p, addr: addr, token: token}, nil
}

// directJob is one direct copy: the entry at srcPath on src, checkpoint
// seq named name (part, for a part of a sharded checkpoint), read at most
// rate bytes per second (0: no cap), at low priority or not, its streams
// held to the idle deadline idle (CopyIdle when 0).
type directJob struct {
	src     Host
	srcPath string
	seq     int
	name    string
	part    string
	rate    int64
	low     bool
	idle    time.Duration
}

// idleOr is the job's idle deadline.
func (j directJob) idleOr() time.Duration {
	if j.idle > 0 {
		return j.idle
	}
	return CopyIdle
}

// dest is where the copy lands on h, as the record notes it.
func (j directJob) dest(h Host) Location {
	if j.part != "" {
		return Location{Kind: Copy, Host: h.Name, Part: j.part, Path: path.Join(partDir(h.Own, j.seq, j.part), j.name)}
	}
	return Location{Kind: Copy, Host: h.Name, Path: path.Join(h.Own, seqDir(j.seq), j.name)}
}
