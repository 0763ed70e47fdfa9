//go:build !droveragent

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/elastic"
	"github.com/droverhq/drover/launcher/fanout"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/plan"
)

// planCommand shows what `drover run` would start, without touching the
// network: the plan is computed from the files alone.
func planCommand() *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "show the processes a job would start, with their environment",
		ArgsUsage: "JOB.toml",
		Description: `Reads the job (and inventory) and prints every process drover would start:
host, role, ranks, GPUs, port, environment and command. Nothing is started
and no host is contacted, so hosts with gpus = "auto" are planned as hosts
without GPUs and flagged "unprobed".

Formats: table (default), env (export lines and the command for each
process, ready to paste into a shell on that host), json (for scripts),
sbatch (the script drover submit would submit; the submit flags apply).
Values of secret-looking variables (*TOKEN*, *SECRET*, *PASSWORD*, *PASSWD*,
*_KEY) are shown as **** in every format unless --show-secrets is given.`,
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: string(plan.FormatTable),
				Usage: "output format: table, env, json or sbatch (the script drover submit submits)"},
			&cli.BoolFlag{Name: "show-secrets", Usage: "print secret-looking values instead of ****"},
			&cli.StringFlag{Name: "partition", Usage: "with --format sbatch: as drover submit --partition"},
			&cli.StringFlag{Name: "time", Usage: "with --format sbatch: as drover submit --time"},
			&cli.IntFlag{Name: "nodes", Usage: "with --format sbatch: as drover submit --nodes"},
			&cli.IntFlag{Name: "gpus-per-node", Usage: "with --format sbatch: as drover submit --gpus-per-node"},
			&cli.BoolFlag{Name: "probe", Usage: `ask the hosts over SSH first: the GPUs gpus = "auto" hosts select, and each host's network interface to MASTER_ADDR (NIC)`},
			&cli.StringSliceFlag{Name: "hosts-lost", Usage: "show the plan the job shrinks to (min_hosts) when these hosts are lost with no spare, e.g. --hosts-lost h3"},
		),
		Action: planAction,
	}
}

func planAction(c *cli.Context) error {
	if c.NArg() != 1 {
		return usage(c)
	}
	job := c.Args().First()
	if c.String("format") == "sbatch" {
		_, script, err := sbatchScript(c, job)
		if err != nil {
			return err
		}
		_, err = io.WriteString(c.App.Writer, script)
		return err
	}
	format, err := plan.ParseFormat(c.String("format"))
	if err != nil {
		return cli.Exit("plan: --format: "+err.Error(), agent.ExitUsage)
	}
	cfg, err := loadJob(c, false)
	if err != nil {
		return err
	}
	in := plan.PlanInput{Config: cfg}
	if c.Bool("probe") {
		if in.GPUs, err = probeForPlan(c, cfg); err != nil {
			return err
		}
	}
	p, err := plan.Build(in)
	if err != nil {
		return err
	}
	if lost := c.StringSlice("hosts-lost"); len(lost) > 0 {
		if in, p, err = shrunkPlan(cfg, in, p, lost); err != nil {
			return err
		}
	}
	if c.Bool("probe") {
		if p, err = planWithIfaces(c, cfg, in, p); err != nil {
			return err
		}
	}
	if err := plan.Render(c.App.Writer, p, format, plan.RenderOptions{ShowSecrets: c.Bool("show-secrets")}); err != nil {
		return fmt.Errorf("plan %s: write output: %w", job, err)
	}
	return nil
}

// shrunkPlan is the plan full's job runs after lost are lost with no
// spare, as drover run decides it (elastic.Decide: min_hosts, TensorFlow
// tasks other than workers), with a note saying what shrank; an error
// when the job would stop instead, or when lost names no planned host.
func shrunkPlan(cfg *config.Config, in plan.PlanInput, full *plan.Plan, lost []string) (plan.PlanInput, *plan.Plan, error) {
	var names []string
	for _, h := range full.Hosts {
		names = append(names, h.Name)
	}
	for _, h := range lost {
		if !slices.Contains(names, h) {
			return in, nil, cli.Exit(fmt.Sprintf("plan: --hosts-lost: %s is not a host of the plan (%s)", h, strings.Join(names, ", ")), agent.ExitUsage)
		}
	}
	d, err := elastic.Decide(elastic.Input{Hosts: names, Lost: lost, MinHosts: cfg.Job.MinHosts, Pinned: elastic.Pinned(full)})
	if err != nil {
		return in, nil, fmt.Errorf("plan: the job would stop: %w", err)
	}
	in.Config, in.PrevWorldSize = elastic.Config(cfg, full, d.Drop), full.WorldSize()
	p, err := plan.Build(in)
	if err != nil {
		return in, nil, fmt.Errorf("plan without %s: %w", strings.Join(d.Drop, ", "), err)
	}
	p.Notes = append(p.Notes, fmt.Sprintf("%s lost with no spare: the group goes on with %d of %d hosts (min_hosts = %d), world size %d -> %d",
		strings.Join(d.Drop, ", "), len(d.Keep), len(names), cfg.Job.MinHosts, full.WorldSize(), p.WorldSize()))
	return in, p, nil
}

// probeForPlan probes the gpus = "auto" hosts and returns their selected
// GPUs; a host that cannot be probed or whose selection fails (min_gpus)
// makes the plan fail, as it would make drover run fail.
func probeForPlan(c *cli.Context, cfg *config.Config) (map[string]plan.HostGPUs, error) {
	var auto []config.Host
	for _, h := range cfg.Hosts {
		if h.GPUs.Auto && !h.Spare {
			auto = append(auto, h)
		}
	}
	out := map[string]plan.HostGPUs{}
	if len(auto) == 0 {
		return out, nil
	}
	bin, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the drover binary to install on hosts: %w", err)
	}
	var errs []error
	for _, r := range fanout.Probe(c.Context, cfg.Job, auto, dialOptions(c, cfg.Hosts), bin) {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("probe %s: %w", r.Report.Host, r.Err))
			continue
		}
		out[r.Report.Host] = plan.HostGPUs{Indices: r.Selection.Indices, Probed: true}
	}
	return out, errors.Join(errs...)
}

// planWithIfaces plans again with the network interface each host uses to
// reach the rendezvous address, asked of the hosts themselves (the NIC
// column; NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME), as drover run does.
func planWithIfaces(c *cli.Context, cfg *config.Config, in plan.PlanInput, p *plan.Plan) (*plan.Plan, error) {
	ts, errs := cluster.DialAll(c.Context, config.Endpoints(p.Hosts), dialOptions(c, cfg.Hosts))
	var up []cluster.Transport
	for i := range ts {
		if errs[i] == nil {
			up = append(up, ts[i])
			defer ts[i].Close()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	in.Ifaces = hostio.DiscoverIfaces(c.Context, up, p.RendezvousAddr())
	return plan.Build(in)
}
