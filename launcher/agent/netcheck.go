package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/droverhq/drover/launcher/peerauth"
	"github.com/urfave/cli/v2"
)

// `drover check net` measures the links between hosts with two agent
// commands, no MPI: `agent net-listen` on each host accepts measurements
// on an ephemeral port of the job's interface (or of the address drover
// reaches the host at: never every address), and `agent net-send`
// measures one link from the host it runs on. Both read a one-time token
// from stdin, which reaches them over drover's SSH connection only, and
// prove to each other that they know it (package peerauth: the token never
// crosses the network). Until a connection is proven the listener reads
// exactly peerauth.ProofSize bytes of it within netProofTimeout, and holds
// at most maxUnproven such connections (more are closed at once): a
// stranger's connections cost it a few KiB, never memory without end. The
// listener stops when its stdin ends (drover is done or gone), at
// --timeout, or after --accept measurements.

// ListeningPrefix starts the line net-listen prints once it listens:
// "listening 10.0.0.12:41234" (":41234" when no interface was named).
const ListeningPrefix = "listening "

// Protocol bytes after the token line: a ping echoed back, then the data
// whose end the receiver answers with "BYTES NANOS\n".
const (
	netPing = 'p'
	netData = 'd'
	// netPings is how many round trips a measurement times (the median
	// counts).
	netPings = 9
	// netProofTimeout bounds a connection's proof of the token.
	netProofTimeout = 5 * time.Second
	// maxUnproven is how many connections that have not proven the token
	// the listener holds at once.
	maxUnproven = 16
)

// netAuth is the handshake of link measurements.
var netAuth = peerauth.Scheme{Label: "drover-net-check-1", Timeout: netProofTimeout}

// NetListenOptions are `drover agent net-listen`'s flags.
type NetListenOptions struct {
	// Iface is the network interface whose address to listen on (the
	// one the job's collectives use).
	Iface string
	// Listen is the address to listen on when Iface is "" (the one
	// drover reaches the host at). With neither, NetListen refuses:
	// it never listens on every address.
	Listen string
	// Accept is how many measurements to serve before exiting (0: until
	// stdin ends or Timeout).
	Accept int
	// Timeout bounds the listener's life.
	Timeout time.Duration
}

// NetSendOptions are `drover agent net-send`'s flags.
type NetSendOptions struct {
	// To is the listener's "IP:PORT".
	To string
	// Duration is how long data is sent.
	Duration time.Duration
}

// NetResult is what net-send prints: one link, measured from its sender.
type NetResult struct {
	To string `json:"to"`
	// Bytes arrived in Seconds, between the first and last byte at the
	// receiver.
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	BitsPerSec float64 `json:"bits_per_second"`
	// RTTMicros is the median round trip of a one-byte ping.
	RTTMicros float64 `json:"rtt_us"`
}

// NetListenCommand returns the argv of `drover agent net-listen`.
func NetListenCommand(binary string, o NetListenOptions) []string {
	argv := []string{binary, cmdAgent, cmdNetListen}
	if o.Iface != "" {
		argv = append(argv, "--"+flagIface, o.Iface)
	}
	if o.Listen != "" {
		argv = append(argv, "--"+flagListen, o.Listen)
	}
	if o.Accept > 0 {
		argv = append(argv, "--"+flagAccept, strconv.Itoa(o.Accept))
	}
	if o.Timeout > 0 {
		argv = append(argv, "--"+flagTimeout, o.Timeout.String())
	}
	return argv
}

// NetSendCommand returns the argv of `drover agent net-send`.
func NetSendCommand(binary string, o NetSendOptions) []string {
	return []string{binary, cmdAgent, cmdNetSend, "--" + flagTo, o.To, "--" + flagDuration, o.Duration.String()}
}

func netListenCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdNetListen,
		Usage: "accept link measurements from senders that prove the token read from stdin",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagIface, Usage: "listen on this `INTERFACE`'s address"},
			&cli.StringFlag{Name: flagListen, Usage: "listen on this `ADDR` when no --iface is named"},
			&cli.IntFlag{Name: flagAccept, Usage: "exit after this many measurements (0: when stdin ends)"},
			&cli.DurationFlag{Name: flagTimeout, Value: 5 * time.Minute, Usage: "exit after this long"},
		},
		Action: failedAction(func(c *cli.Context) error {
			return NetListen(c.Context, netListenOptions(c), c.App.Reader, c.App.Writer)
		}),
	}
}

func netListenOptions(c *cli.Context) NetListenOptions {
	return NetListenOptions{Iface: c.String(flagIface), Listen: c.String(flagListen), Accept: c.Int(flagAccept), Timeout: c.Duration(flagTimeout)}
}

func netSendCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdNetSend,
		Usage: "measure the link to a net-listen, proving the token read from stdin",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagTo, Required: true, Usage: "the listener's `IP:PORT`"},
			&cli.DurationFlag{Name: flagDuration, Value: 2 * time.Second, Usage: "send data this long"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			res, err := NetSend(c.Context, netSendOptions(c), c.App.Reader)
			if err != nil {
				return cli.Exit(err.Error(), ExitFailed)
			}
			return json.NewEncoder(c.App.Writer).Encode(res)
		},
	}
}

func netSendOptions(c *cli.Context) NetSendOptions {
	return NetSendOptions{To: c.String(flagTo), Duration: c.Duration(flagDuration)}
}

// readToken reads the one-time token, the first line of r.
func readToken(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadString('\n')
	if strings.TrimSpace(line) == "" {
		return nil, fmt.Errorf("read the token from stdin: got none (%v)", err)
	}
	return peerauth.ParseToken(line)
}

// NetListen serves measurements (see the protocol above) until stdin
// ends, o.Timeout passes or o.Accept were served.
func NetListen(ctx context.Context, o NetListenOptions, stdin io.Reader, w io.Writer) error {
	in := bufio.NewReader(stdin)
	tok, err := readToken(in)
	if err != nil {
		return err
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	ip, err := listenIP(o)
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return fmt.Errorf("listen on %s: %w", ip, err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	if _, err := fmt.Fprintf(w, "%s%s\n", ListeningPrefix, ln.Addr()); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var served atomic.Int64
	unproven := make(chan struct{}, maxUnproven)
	for {
		conn, err := ln.Accept()
		if err != nil {
			return nil // closed: stdin ended, timed out or all served
		}
		select {
		case unproven <- struct{}{}:
		default:
			conn.Close() // full of connections still proving: a flood
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if serveMeasurement(ctx, conn, tok, func() { <-unproven }) && o.Accept > 0 && served.Add(1) >= int64(o.Accept) {
				cancel()
			}
		}()
	}
}

// listenIP is where net-listen listens: o.Iface's address, else o.Listen
// (an IP, or a name resolved here); never every address.
func listenIP(o NetListenOptions) (string, error) {
	if o.Iface != "" {
		return ifaceIP(o.Iface)
	}
	if o.Listen == "" {
		return "", errors.New("net-listen: name the job's interface (--iface) or this host's address (--listen); it does not listen on every address")
	}
	if ip := net.ParseIP(o.Listen); ip != nil {
		if ip.IsUnspecified() {
			return "", fmt.Errorf("net-listen: --listen %s is every address; name this host's address on the job's network", o.Listen)
		}
		return ip.String(), nil
	}
	ips, err := net.LookupIP(o.Listen)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("net-listen: resolve --listen %s: %v", o.Listen, err)
	}
	return ips[0].String(), nil
}

// ifaceIP is the first address of interface name (IPv4 first), "" for
// no name.
func ifaceIP(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("find interface %s: %w", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("read the addresses of %s: %w", name, err)
	}
	var v6 string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP.String(), nil
		}
		if v6 == "" {
			v6 = n.IP.String()
		}
	}
	if v6 == "" {
		return "", fmt.Errorf("interface %s has no address", name)
	}
	return v6, nil
}

// serveMeasurement answers one sender: its proof of the token, its
// pings, then its data with the count and time it took; false when it
// did not prove the token. proven is called once the proof is over,
// whatever its outcome.
func serveMeasurement(ctx context.Context, conn net.Conn, tok []byte, proven func()) bool {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	err := netAuth.ProveListener(conn, tok)
	proven()
	if err != nil {
		return false
	}
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(conn)
	for {
		op, err := r.ReadByte()
		if err != nil {
			return false
		}
		if op == netPing {
			if _, err := conn.Write([]byte{netPing}); err != nil {
				return false
			}
			continue
		}
		if op != netData {
			return false
		}
		n, d, err := countData(r)
		if err != nil {
			return false
		}
		_, err = fmt.Fprintf(conn, "%d %d\n", n, d.Nanoseconds())
		return err == nil
	}
}

// countData reads r to its end and returns the bytes and the time
// between the first and the last.
func countData(r io.Reader) (int64, time.Duration, error) {
	buf := make([]byte, 256<<10)
	var n int64
	var first, last time.Time
	for {
		k, err := r.Read(buf)
		if k > 0 {
			last = time.Now()
			if first.IsZero() {
				first = last
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) {
			return n, last.Sub(first), nil
		}
		if err != nil {
			return n, 0, err
		}
	}
}

// NetSend measures the link to o.To: the median of netPings round
// trips, then data sent for o.Duration as the receiver counted it.
func NetSend(ctx context.Context, o NetSendOptions, stdin io.Reader) (NetResult, error) {
	res := NetResult{To: o.To}
	tok, err := readToken(bufio.NewReader(stdin))
	if err != nil {
		return res, err
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", o.To)
	if err != nil {
		return res, fmt.Errorf("connect to %s: %w", o.To, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := netAuth.ProveDialer(conn, tok); err != nil {
		return res, fmt.Errorf("prove the token to %s: %w", o.To, err)
	}
	_ = conn.SetDeadline(time.Now().Add(10*time.Second + 2*o.Duration))
	if res.RTTMicros, err = pings(conn); err != nil {
		return res, fmt.Errorf("ping %s: %w", o.To, err)
	}
	if err := sendData(conn, o.Duration); err != nil {
		return res, fmt.Errorf("send data to %s: %w", o.To, err)
	}
	var nanos int64
	if _, err := fmt.Fscanf(conn, "%d %d\n", &res.Bytes, &nanos); err != nil {
		return res, fmt.Errorf("read the count from %s: %w", o.To, err)
	}
	res.Seconds = float64(nanos) / 1e9
	if res.Seconds > 0 {
		res.BitsPerSec = float64(res.Bytes) * 8 / res.Seconds
	}
	return res, nil
}

// pings times netPings one-byte round trips and returns the median, in
// microseconds.
func pings(conn net.Conn) (float64, error) {
	rtts := make([]float64, 0, netPings)
	b := []byte{netPing}
	for range netPings {
		start := time.Now()
		if _, err := conn.Write(b); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(conn, b); err != nil {
			return 0, err
		}
		rtts = append(rtts, float64(time.Since(start).Microseconds()))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// sendData writes data for d, then closes the sending side.
func sendData(conn net.Conn, d time.Duration) error {
	if _, err := conn.Write([]byte{netData}); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	end := time.Now().Add(d)
	_ = conn.SetWriteDeadline(end)
	for time.Now().Before(end) {
		if _, err := conn.Write(buf); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			return err
		}
	}
	_ = conn.SetWriteDeadline(time.Time{})
	if tc, ok := conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}
