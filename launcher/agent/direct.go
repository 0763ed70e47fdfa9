package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/checkpoint"
)

// The agent's ends of a direct checkpoint copy (checkpoint.SendDirect and
// ReceiveDirect). Both read their one-time token(s) from stdin, one a
// line, where the controller writes them over SSH: never on the command
// line, which other users of the host can read. Both then stop when stdin
// closes: a controller that went away, or gave up, ends the copy.

// readTokens reads n token lines from in.
func readTokens(in *bufio.Reader, n int) ([][]byte, error) {
	out := make([][]byte, n)
	for i := range out {
		line, err := in.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("read the one-time token from stdin: %w", err)
		}
		if out[i], err = checkpoint.ParseToken(line); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// untilEOF returns a context cancelled when in reaches its end.
func untilEOF(ctx context.Context, in io.Reader) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	return ctx, cancel
}

func recvAction(c *cli.Context, o checkpoint.PeerRecv) error {
	if o.LowPriority {
		if err := LowerPriority(); err != nil {
			return cli.Exit(err.Error(), ExitFailed)
		}
	}
	in := bufio.NewReader(c.App.Reader)
	n := 1
	if o.Forward != "" {
		n = 2
	}
	tokens, err := readTokens(in, n)
	if err != nil {
		return cli.Exit(err.Error(), ExitFailed)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Listen, "0"))
	if err != nil {
		return cli.Exit(fmt.Sprintf("direct copy: listen on %s: %v", o.Listen, err), ExitFailed)
	}
	fmt.Fprintf(c.App.Writer, "%s%s\n", checkpoint.ListeningPrefix, ln.Addr())
	ctx, cancel := untilEOF(c.Context, in)
	defer cancel()
	r := checkpoint.Receive{Listener: ln, Token: tokens[0], Own: o.Own, Seq: o.Seq, Name: o.Name, Part: o.Part, Wait: o.Wait, Idle: o.Idle,
		Events: func(format string, args ...any) {
			fmt.Fprintf(c.App.Writer, "%s%s\n", checkpoint.EventPrefix, fmt.Sprintf(format, args...))
		}}
	if o.Forward != "" {
		r.Next = &checkpoint.Forward{Addr: o.Forward, Token: tokens[1]}
	}
	digest, size, err := checkpoint.ReceiveDirect(ctx, r)
	if err != nil {
		return cli.Exit(err.Error(), ExitFailed)
	}
	fmt.Fprintf(c.App.Writer, "%s%s %s\n", checkpoint.ReceivedPrefix, digest, strconv.FormatInt(size, 10))
	return nil
}

func sendAction(c *cli.Context, o checkpoint.PeerSend) error {
	if o.LowPriority {
		if err := LowerPriority(); err != nil {
			return cli.Exit(err.Error(), ExitFailed)
		}
	}
	in := bufio.NewReader(c.App.Reader)
	tokens, err := readTokens(in, 1)
	if err != nil {
		return cli.Exit(err.Error(), ExitFailed)
	}
	ctx, cancel := untilEOF(c.Context, in)
	defer cancel()
	digest, size, err := checkpoint.SendDirect(ctx, o.To, tokens[0], o.Path, o.Name, o.Rate, o.Idle)
	var unreachable *checkpoint.UnreachableError
	if errors.As(err, &unreachable) {
		// The controller copies to that host another way from now on.
		fmt.Fprintf(c.App.Writer, "%s%s%v\n", checkpoint.EventPrefix, checkpoint.Unreachable, err)
	}
	if err != nil {
		return cli.Exit(err.Error(), ExitFailed)
	}
	fmt.Fprintf(c.App.Writer, "%s%s %d\n", checkpoint.SentPrefix, digest, size)
	return nil
}
