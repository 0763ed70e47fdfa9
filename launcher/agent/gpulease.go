package agent

import (
	"encoding/json"
	"errors"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/gpulease"
)

// `drover agent gpu-lease`: the GPU leases of a host (package gpulease).
// The controller starts one per host when an attempt has chosen its
// GPUs; it takes them (waiting in the host's queue with --queue), says
// so on stdout and holds them until its stdin ends: the attempt ended,
// or the controller is gone. With --list it prints the host's leases and
// queue instead.
const (
	cmdGPULease        = "gpu-lease"
	flagGPU            = "gpu"
	flagCount          = "count"
	flagMin            = "min"
	flagControllerHost = "controller-host"
	flagControllerPID  = "controller-pid"
	flagSince          = "since"
	flagQueue          = "queue"
	flagHosts          = "hosts"
	flagList           = "list"
	flagGPULease       = "gpu-lease"
)

// GPULeaseList is what `drover agent gpu-lease --list` prints: the live
// leases and the queue of a host.
type GPULeaseList struct {
	Leases  []gpulease.Holder `json:"leases"`
	Waiters []gpulease.Waiter `json:"waiters"`
	Error   string            `json:"error,omitempty"`
}

// GPULeaseCommand is the argv of `drover agent gpu-lease` for o; Me's
// user and agent pid are the host's to say.
func GPULeaseCommand(binary string, o gpulease.HoldOptions) []string {
	args := []string{binary, cmdAgent, cmdGPULease, "--" + flagDir, o.Dir,
		"--" + flagCount, strconv.Itoa(o.N), "--" + flagMin, strconv.Itoa(o.Min),
		"--" + flagJob, o.Me.Job, "--" + flagRunID, o.Me.RunID,
		"--" + flagControllerHost, o.Me.Host, "--" + flagControllerPID, strconv.Itoa(o.Me.PID),
		"--" + flagSince, o.Me.Since.UTC().Format(time.RFC3339Nano), "--" + flagHosts, strconv.Itoa(o.Hosts)}
	for _, c := range o.Candidates {
		args = append(args, "--"+flagGPU, c.String())
	}
	if o.Queue {
		args = append(args, "--"+flagQueue)
	}
	return args
}

// GPULeaseListCommand is the argv of `drover agent gpu-lease --list`.
func GPULeaseListCommand(binary, dir string) []string {
	return []string{binary, cmdAgent, cmdGPULease, "--" + flagDir, dir, "--" + flagList}
}

func gpuLeaseCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdGPULease,
		Usage: "lease GPUs of this host and hold them until stdin ends (--list: print the leases)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagDir, Value: gpulease.DefaultDir, Usage: "the shared lease directory"},
			&cli.StringSliceFlag{Name: flagGPU, Usage: "a candidate GPU, `INDEX=UUID` (repeat, in order of preference)"},
			&cli.IntFlag{Name: flagCount, Usage: "how many to take (0: every free one)"},
			&cli.IntFlag{Name: flagMin, Usage: "the fewest to start with"},
			&cli.StringFlag{Name: flagJob, Usage: "job name"},
			&cli.StringFlag{Name: flagRunID, Usage: "run `ID`"},
			&cli.StringFlag{Name: flagControllerHost, Usage: "the controller's `HOST`"},
			&cli.IntFlag{Name: flagControllerPID, Usage: "the controller's pid"},
			&cli.StringFlag{Name: flagSince, Usage: "when the run asked (RFC 3339), its place in the queue: a `TIME`"},
			&cli.BoolFlag{Name: flagQueue, Usage: "wait in the host's queue until the GPUs are free"},
			&cli.IntFlag{Name: flagHosts, Usage: "how many hosts the run waits for (for messages)"},
			&cli.BoolFlag{Name: flagList, Usage: "print the host's leases and queue as JSON and exit"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if c.Bool(flagList) {
				return writeGPULeases(c)
			}
			o, err := gpuLeaseOptions(c)
			if err != nil {
				return cli.Exit(err.Error(), ExitUsage)
			}
			if err := gpulease.Hold(c.Context, o, c.App.Reader, c.App.Writer); err != nil {
				return cli.Exit("", ExitFailed) // said on stdout, as an event
			}
			return nil
		},
	}
}

func gpuLeaseOptions(c *cli.Context) (gpulease.HoldOptions, error) {
	o := gpulease.HoldOptions{Dir: c.String(flagDir), N: c.Int(flagCount), Min: c.Int(flagMin),
		Queue: c.Bool(flagQueue), Hosts: c.Int(flagHosts)}
	for _, s := range c.StringSlice(flagGPU) {
		cand, err := gpulease.ParseCandidate(s)
		if err != nil {
			return o, err
		}
		o.Candidates = append(o.Candidates, cand)
	}
	since, err := time.Parse(time.RFC3339Nano, c.String(flagSince))
	if err != nil {
		return o, errors.New("--since: want an RFC 3339 time")
	}
	if err := CheckRunID(c.String(flagRunID)); err != nil {
		return o, err
	}
	o.Me = gpulease.Holder{Job: c.String(flagJob), RunID: c.String(flagRunID), User: userName(),
		UID: os.Getuid(), Host: c.String(flagControllerHost), PID: c.Int(flagControllerPID), Since: since}
	return o, nil
}

func userName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

func writeGPULeases(c *cli.Context) error {
	var out GPULeaseList
	dir := c.String(flagDir)
	live, err := gpulease.List(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		out.Error = err.Error()
	}
	for _, h := range live {
		out.Leases = append(out.Leases, h)
	}
	if ws, err := gpulease.Waiters(dir); err == nil {
		out.Waiters = ws
	}
	return json.NewEncoder(c.App.Writer).Encode(out)
}
