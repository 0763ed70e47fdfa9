//go:build !droveragent

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/top"
	"github.com/droverhq/drover/launcher/topview"
)

// topCommand is `drover top JOB.toml`: the fleet's GPUs and the job's
// processes, live (see top.Watch and package topview).
func topCommand() *cli.Command {
	return &cli.Command{
		Name:      "top",
		Usage:     "watch each host's GPUs and the job's processes, live",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "hosts", Usage: "watch only these hosts (comma-separated names)"},
			&cli.BoolFlag{Name: "once", Usage: "print one view and exit"},
			&cli.BoolFlag{Name: "json", Usage: "with --once: print the view as JSON"},
			&cli.DurationFlag{Name: "every", Value: time.Second, Usage: "refresh this often"},
			&cli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus metrics at /metrics on this `ADDR` (\":9400\" is localhost's port 9400; \"0.0.0.0:9400\" or an address of this machine exposes them)"},
			&cli.StringFlag{Name: "textfile", TakesFile: true, Usage: "write Prometheus metrics to this `FILE` every refresh (node_exporter's textfile collector)"},
		),
		Action: topAction,
	}
}

func topAction(c *cli.Context) error {
	t, err := loadFleetTarget(c, true)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	every := c.Duration("every")
	w := top.Watch(ctx, top.Options{Job: t.cfg.Job, Hosts: t.hosts, Dial: t.dial(c), Bin: t.bin, Every: every})
	if c.Bool("once") {
		return topOnce(ctx, c, w)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(topview.NewCollector(w.View))
	if addr := c.String("metrics-addr"); addr != "" {
		if err := serveMetrics(ctx, c, addr, reg); err != nil {
			return err
		}
	}
	if file := c.String("textfile"); file != "" {
		go writeTextfile(ctx, c, file, reg, every)
	}
	if f, ok := c.App.Writer.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return topview.Interactive(ctx, w.View, every)
	}
	if c.String("metrics-addr") != "" || c.String("textfile") != "" {
		<-ctx.Done() // no terminal: an exporter, quiet until stopped
		return nil
	}
	// No terminal (a pipe, a file): what --once prints, at each refresh,
	// from the first view every host answered for.
	wctx, cancel := context.WithTimeout(ctx, topOnceWait)
	w.WaitFirst(wctx)
	cancel()
	return topview.Print(ctx, c.App.Writer, w.View, every)
}

// topOnce prints the first view every host answered (or failed) for,
// waiting at most topOnceWait.
func topOnce(ctx context.Context, c *cli.Context, w *top.Watcher) error {
	wctx, cancel := context.WithTimeout(ctx, topOnceWait)
	defer cancel()
	w.WaitFirst(wctx)
	// A step rate needs a second sample whose step differs.
	w.WaitRates(ctx, topRateWindow(c.Duration("every")))
	v := w.View()
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := fmt.Fprintln(c.App.Writer, strings.Join(topview.Rows(v), "\n"))
	return err
}

// topOnceWait bounds --once: a host that has not answered by then shows
// as what it is so far ("connecting", or its error).
const topOnceWait = 15 * time.Second

// topRateWindow is how long --once waits, after the first samples, for
// every process's step rate: two more samples (at --every), at most 5 s.
func topRateWindow(every time.Duration) time.Duration {
	return min(2*every+every/2, 5*time.Second)
}

// metricsAddr is where --metrics-addr listens: a port alone (":9400",
// "9400") is localhost's, since the metrics name the job's hosts, ranks
// and GPUs to whoever asks; another machine's Prometheus needs an
// address named on purpose ("0.0.0.0:9400", or one of this machine's).
func metricsAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if _, perr := strconv.Atoi(addr); perr != nil {
			return addr // net.Listen says what is wrong with it
		}
		host, port = "", addr
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// serveMetrics listens on addr (see metricsAddr) and serves reg at
// /metrics until ctx ends; the address it got goes to stderr (":0" picks
// a port).
func serveMetrics(ctx context.Context, c *cli.Context, addr string, reg *prometheus.Registry) error {
	ln, err := net.Listen("tcp", metricsAddr(addr))
	if err != nil {
		return cli.Exit(fmt.Sprintf("drover top: --metrics-addr %s: %v", addr, err), agent.ExitUsage)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(c.App.ErrWriter, "drover top: metrics server: %v\n", err)
		}
	}()
	fmt.Fprintf(c.App.ErrWriter, "drover top: metrics on http://%s/metrics\n", ln.Addr())
	return nil
}

// writeTextfile writes reg's metrics to file every interval (atomically,
// as node_exporter's textfile collector wants) until ctx ends.
func writeTextfile(ctx context.Context, c *cli.Context, file string, reg *prometheus.Registry, every time.Duration) {
	warned := false
	for {
		if err := prometheus.WriteToTextfile(file, reg); err != nil && !warned {
			fmt.Fprintf(c.App.ErrWriter, "drover top: --textfile: %v\n", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
