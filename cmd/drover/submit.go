//go:build !droveragent

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/slurm"
	"github.com/droverhq/drover/launcher/agent"
)

func submitCommand() *cli.Command {
	return &cli.Command{
		Name:      "submit",
		Usage:     "submit the job to Slurm: an sbatch script that runs drover run in the allocation",
		ArgsUsage: "JOB.toml",
		Description: `Writes runs/<job>.sbatch next to the job file, submits it with sbatch and
prints the Slurm job id. Inside the allocation drover run takes the hosts
from the allocation (--inventory slurm) and starts every process as a job
step; scancel stops them all. Options come from the job file's [slurm]
table; the flags override it. drover plan --format sbatch prints the
script without submitting.`,
		Flags: submitFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage(c)
			}
			cfg, script, err := sbatchScript(c, c.Args().First())
			if err != nil {
				return err
			}
			path := filepath.Join(filepath.Dir(cfg.Path), "runs", cfg.Job.Name+".sbatch")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("submit %s: %w", cfg.Path, err)
			}
			if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
				return fmt.Errorf("submit %s: write sbatch script: %w", cfg.Path, err)
			}
			id, err := sbatch(path, filepath.Dir(cfg.Path))
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, id)
			return nil
		},
	}
}

func submitFlags() []cli.Flag {
	return withFleetFlags(
		&cli.StringFlag{Name: "partition", Usage: "Slurm partition (default: [slurm] partition, else the cluster's)"},
		&cli.StringFlag{Name: "time", Usage: `time limit, e.g. "4:00:00" (default: [slurm] time)`},
		&cli.IntFlag{Name: "nodes", Usage: "nodes to allocate (default: [slurm] nodes, else the job's hosts)"},
		&cli.IntFlag{Name: "gpus-per-node", Usage: "GPUs per node (default: [slurm] gpus_per_node)"},
	)
}

// sbatchScript loads the job for submission and writes its sbatch script.
func sbatchScript(c *cli.Context, job string) (*config.Config, string, error) {
	cfg, err := config.Load(job, config.LoadOptions{InventoryPath: c.String(flagInventory), Submit: true})
	if err != nil {
		return nil, "", err
	}
	bin, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("find the drover binary the allocation runs: %w", err)
	}
	flags := config.Slurm{Partition: c.String("partition"), Time: c.String("time"),
		Nodes: c.Int("nodes"), GPUsPerNode: c.Int("gpus-per-node")}
	script, err := slurm.Script(slurm.ScriptInput{Config: cfg, Drover: bin, Flags: flags})
	if err != nil {
		return nil, "", cli.Exit(err.Error(), agent.ExitUsage)
	}
	return cfg, script, nil
}

// sbatch submits script from dir and returns the job id it prints.
func sbatch(script, dir string) (string, error) {
	cmd := exec.Command("sbatch", "--parsable", script)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("submit %s: sbatch: %w: %s", script, err, strings.TrimSpace(errb.String()))
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out.String()), ";")
	if id == "" {
		return "", fmt.Errorf("submit %s: sbatch printed no job id", script)
	}
	return id, nil
}
