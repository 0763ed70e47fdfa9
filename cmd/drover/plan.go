package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher"
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
process, ready to paste into a shell on that host), json (for scripts).
Values of secret-looking variables (*TOKEN*, *SECRET*, *PASSWORD*, *PASSWD*,
*_KEY) are shown as **** in every format unless --show-secrets is given.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: string(launcher.FormatTable),
				Usage: "output format: table, env or json"},
			&cli.BoolFlag{Name: "show-secrets", Usage: "print secret-looking values instead of ****"},
			&cli.StringFlag{Name: "inventory", Aliases: []string{"i"},
				Usage: "read the hosts from this TOML file instead of the job file", TakesFile: true},
			&cli.BoolFlag{Name: "probe", Usage: `probe gpus = "auto" hosts over SSH first (not available yet)`},
		},
		Action: planAction,
	}
}

func planAction(c *cli.Context) error {
	job, err := planArgs(c)
	if err != nil {
		return cli.Exit("plan: "+err.Error(), exitConfig)
	}
	format, err := launcher.ParseFormat(c.String("format"))
	if err != nil {
		return cli.Exit("plan: --format: "+err.Error(), exitConfig)
	}
	if c.Bool("probe") {
		return cli.Exit("plan: --probe is not available yet; run drover probe to see the GPUs of gpus = \"auto\" hosts", exitConfig)
	}
	cfg, err := cluster.Load(job, cluster.LoadOptions{InventoryPath: c.String("inventory")})
	if err != nil {
		return err
	}
	p, err := launcher.Build(launcher.PlanInput{Config: cfg})
	if err != nil {
		return err
	}
	if err := launcher.Render(c.App.Writer, p, format, launcher.RenderOptions{ShowSecrets: c.Bool("show-secrets")}); err != nil {
		return fmt.Errorf("plan %s: write output: %w", job, err)
	}
	return nil
}

// planArgs returns the job file and applies flags written after it
// (`drover plan job.toml --format env`), which urfave/cli v2 leaves
// unparsed as arguments.
func planArgs(c *cli.Context) (string, error) {
	args := c.Args().Slice()
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "show-secrets", "probe":
			if !hasValue {
				value = "true"
			}
		case "format", "f", "inventory", "i":
			if !hasValue {
				if i+1 >= len(args) {
					return "", fmt.Errorf("flag needs a value: %s", a)
				}
				i++
				value = args[i]
			}
		default:
			return "", fmt.Errorf("unknown flag %s", a)
		}
		if err := c.Set(name, value); err != nil {
			return "", fmt.Errorf("flag %s: %w", a, err)
		}
	}
	if len(pos) != 1 {
		return "", fmt.Errorf("want exactly one job file, got %d arguments (usage: drover plan JOB.toml [--format table|env|json] [--show-secrets] [--inventory FILE])", len(pos))
	}
	return pos[0], nil
}
