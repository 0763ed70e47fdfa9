//go:build !droveragent

package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
)

// The flags every command that reads a job file takes, declared here once
// so that no command can lack one or spell it differently: where the hosts
// come from, and what to do with a host key not yet in known_hosts.
const (
	flagInventory      = "inventory"
	flagAcceptNewHosts = "accept-new-hosts"
)

// withFleetFlags returns a command's own flags followed by the fleet flags.
func withFleetFlags(own ...cli.Flag) []cli.Flag {
	return append(own,
		&cli.StringFlag{Name: flagInventory, Aliases: []string{"i"}, TakesFile: true,
			Usage: "read the hosts from this TOML file instead of the job file"},
		&cli.BoolFlag{Name: flagAcceptNewHosts,
			Usage: "trust and record host keys not yet in known_hosts (like ssh accept-new)"},
	)
}

// loadJob loads the job named by the command's one argument, with the
// hosts from --inventory when given. hostsOnly accepts an inventory file
// on its own (exec and probe need no job).
// Inside a Slurm allocation the allocation's nodes are available too
// (inventory = "slurm", --inventory slurm, or a job without hosts).
func loadJob(c *cli.Context, hostsOnly bool) (*config.Config, error) {
	return loadInAllocation(c.Args().First(), config.LoadOptions{
		InventoryPath: c.String(flagInventory),
		HostsOnly:     hostsOnly,
	})
}

// dialOptions are the options every dial of a command's hosts uses;
// inventory lets a ProxyJump name another host of the inventory. Inside a
// Slurm allocation its nodes are reached with srun.
func dialOptions(c *cli.Context, inventory []config.Host) cluster.DialOptions {
	return cluster.DialOptions{
		AcceptNewHosts: c.Bool(flagAcceptNewHosts),
		Inventory:      config.Endpoints(inventory),
		Dialers:        slurmDialers(),
	}
}

// fleetTarget is what probe, top and check net read before they dial: the
// job, the hosts --hosts picks (spares included: a spare is probed,
// watched and measured like any host) and the drover binary they install
// on the hosts.
type fleetTarget struct {
	cfg   *config.Config
	hosts []config.Host
	bin   string
}

// loadFleetTarget reads a fleetTarget from the command's one argument and
// its --hosts flag; hostsOnly as for loadJob.
func loadFleetTarget(c *cli.Context, hostsOnly bool) (fleetTarget, error) {
	cfg, hosts, err := loadJobHosts(c, hostsOnly, true)
	if err != nil {
		return fleetTarget{}, err
	}
	bin, err := os.Executable()
	if err != nil {
		return fleetTarget{}, fmt.Errorf("find the drover binary to install on hosts: %w", err)
	}
	return fleetTarget{cfg: cfg, hosts: hosts, bin: bin}, nil
}

// loadJobHosts reads the job named by the command's one argument
// (hostsOnly as for loadJob) and the hosts its --hosts flag picks (spares
// only withSpares: see pickHosts); a wrong argument count or host name is
// a usage error.
func loadJobHosts(c *cli.Context, hostsOnly, withSpares bool) (*config.Config, []config.Host, error) {
	if c.NArg() != 1 {
		return nil, nil, usage(c)
	}
	cfg, err := loadJob(c, hostsOnly)
	if err != nil {
		return nil, nil, err
	}
	hosts, err := pickHosts(cfg.Hosts, c.String("hosts"), withSpares)
	if err != nil {
		return nil, nil, cli.Exit(err.Error(), agent.ExitUsage)
	}
	return cfg, hosts, nil
}

// dial is the dial options for the target's hosts.
func (t fleetTarget) dial(c *cli.Context) cluster.DialOptions {
	return dialOptions(c, t.cfg.Hosts)
}
