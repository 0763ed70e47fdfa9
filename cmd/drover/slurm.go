//go:build !droveragent

package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/slurm"
)

// allocation reads the Slurm allocation drover runs in (nil outside one)
// and adds its hosts to opts, so that a job with inventory = "slurm", or
// without hosts, runs on the allocation's nodes.
func allocation(opts config.LoadOptions) (config.LoadOptions, *slurm.Allocation, error) {
	a, ok, err := slurm.FromEnv(os.Getenv)
	if err != nil || !ok {
		return opts, nil, err
	}
	opts.Allocation = a.Hosts()
	return opts, a, nil
}

// loadInAllocation is config.Load with the allocation's nodes available.
func loadInAllocation(path string, opts config.LoadOptions) (*config.Config, error) {
	opts, _, err := allocation(opts)
	if err != nil {
		return nil, err
	}
	return config.Load(path, opts)
}

// slurmDialers reach the allocation's nodes with srun steps, the step
// helper being this drover binary (which must be on the shared filesystem,
// at the same path on every node). Outside an allocation there are none.
func slurmDialers() map[string]func(context.Context, cluster.Endpoint) (cluster.Transport, error) {
	a, ok, err := slurm.FromEnv(os.Getenv)
	if err != nil || !ok {
		return nil // loadJob reports a broken allocation environment
	}
	bin, err := os.Executable()
	if err != nil {
		return nil // the dial then names the transport it cannot reach
	}
	return map[string]func(context.Context, cluster.Endpoint) (cluster.Transport, error){
		config.TransportSlurm: func(ctx context.Context, h cluster.Endpoint) (cluster.Transport, error) {
			return slurm.Dial(ctx, h, slurm.Options{JobID: a.JobID, Helper: []string{bin, slurmStepCommand}})
		},
	}
}

const slurmStepCommand = "slurm-step"

// slurmStep is the step helper srun runs on a node around every command
// drover starts there (see slurm.StepMain). Not for users.
func slurmStep() *cli.Command {
	return &cli.Command{
		Name:            slurmStepCommand,
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			if code := slurm.StepMain(c.Args().Slice(), c.App.ErrWriter); code != 0 {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}
