package main

import (
	"os"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/slurm"
)

// allocation reads the Slurm allocation drover runs in (nil outside one)
// and adds its hosts to opts, so that a job with inventory = "slurm", or
// without hosts, runs on the allocation's nodes.
func allocation(opts cluster.LoadOptions) (cluster.LoadOptions, *slurm.Allocation, error) {
	a, ok, err := slurm.FromEnv(os.Getenv)
	if err != nil || !ok {
		return opts, nil, err
	}
	opts.Allocation = a.Hosts()
	return opts, a, nil
}

// loadJob loads the job file as drover run and plan see it: inside a Slurm
// allocation, with the allocation's hosts available.
func loadJob(path string, opts cluster.LoadOptions) (*cluster.Config, error) {
	opts, _, err := allocation(opts)
	if err != nil {
		return nil, err
	}
	return cluster.Load(path, opts)
}
