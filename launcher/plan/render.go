package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/droverhq/drover/cluster"
)

// Format is a rendering of a plan for `drover plan --format`.
type Format string

// The renderings of a plan.
const (
	// FormatTable is one row per process, for people.
	FormatTable Format = "table"
	// FormatEnv is, per process, the export lines and the command, ready
	// to paste into a POSIX shell on that host.
	FormatEnv Format = "env"
	// FormatJSON is the whole plan for scripts.
	FormatJSON Format = "json"
)

// Formats lists the valid formats, for flag help and errors.
func Formats() []Format { return []Format{FormatTable, FormatEnv, FormatJSON} }

// ParseFormat checks a --format value.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats() {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown format %q (use table, env or json)", s)
}

// SecretMask replaces the values of secret-looking variables in renderings.
const SecretMask = "****"

// RenderOptions tune a rendering.
type RenderOptions struct {
	// ShowSecrets prints secret-looking values instead of SecretMask. It
	// applies to every format, json included: plans get pasted into bug
	// reports and CI logs, and the supervisor uses the Plan, not its JSON.
	ShowSecrets bool
}

// IsSecretName reports whether an environment variable's value should be
// masked: names containing TOKEN, SECRET, PASSWORD or PASSWD, or ending in
// _KEY, case-insensitively (HF_TOKEN, AWS_SECRET_ACCESS_KEY, WANDB_API_KEY).
func IsSecretName(name string) bool {
	u := strings.ToUpper(name)
	for _, s := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD"} {
		if strings.Contains(u, s) {
			return true
		}
	}
	return strings.HasSuffix(u, "_KEY")
}

func (o RenderOptions) value(name, v string) string {
	if !o.ShowSecrets && IsSecretName(name) {
		return SecretMask
	}
	return v
}

// Render writes p in format f.
func Render(w io.Writer, p *Plan, f Format, opt RenderOptions) error {
	switch f {
	case FormatTable:
		return RenderTable(w, p, opt)
	case FormatEnv:
		return RenderEnv(w, p, opt)
	case FormatJSON:
		return RenderJSON(w, p, opt)
	}
	return fmt.Errorf("render plan: unknown format %q", f)
}

// RenderTable writes a summary line, one row per process, the command(s),
// [job.env] and the notes.
func RenderTable(w io.Writer, p *Plan, opt RenderOptions) error {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: %s, %d %s on %d %s", p.Job, p.Framework,
		len(p.Processes), plural(len(p.Processes), "process", "processes"),
		len(p.Hosts), plural(len(p.Hosts), "host", "hosts"))
	if len(p.Processes) > 0 {
		if a, ok := p.Processes[0].Env["MASTER_ADDR"]; ok {
			fmt.Fprintf(&b, ", rendezvous %s", joinHostPortStr(a, p.Processes[0].Env["MASTER_PORT"]))
		}
	}
	b.WriteString("\n\n")
	// NIC is the interface the collectives use (GLOO_SOCKET_IFNAME, set
	// from what drover plan --probe and drover run find on the host).
	header := []string{"PROCESS", "HOST", "ADDRESS", "RANK", "LOCAL_RANK", "NODE_RANK", "GPUS", "PORT", "NIC"}
	rows := make([][]string, 0, len(p.Processes))
	for _, pr := range p.Processes {
		gpus := "-"
		switch {
		case len(pr.GPUs) > 0:
			gpus = joinInts(pr.GPUs)
		case slices.Contains(p.Unprobed, pr.Host.Name):
			gpus = "unprobed"
		}
		rows = append(rows, []string{pr.Name(), pr.Host.Name, pr.Address,
			dash(pr.Rank), dash(pr.LocalRank), dash(pr.NodeRank), gpus, dash(nonZero(pr.Port)), orDash(pr.Env[glooIfaceEnv])})
	}
	// Columns that do not apply to this framework (all "-") are left out.
	var keep []int
	for c := range header {
		if c == 6 { // GPUS always shows, "-" included
			keep = append(keep, c)
			continue
		}
		for _, r := range rows {
			if r[c] != "-" {
				keep = append(keep, c)
				break
			}
		}
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, r := range append([][]string{header}, rows...) {
		cells := make([]string, len(keep))
		for i, c := range keep {
			cells[i] = r[c]
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n")
	switch {
	case len(p.Processes) == 0:
	case sameCommand(p.Processes):
		fmt.Fprintf(&b, "command: %s\n", shellJoin(p.Processes[0].Command))
	default:
		b.WriteString("commands:\n")
		for _, pr := range p.Processes {
			fmt.Fprintf(&b, "  %s: %s\n", pr.Name(), shellJoin(pr.Command))
		}
	}
	if len(p.JobEnv) > 0 {
		b.WriteString("job env:\n")
		for _, k := range sortedKeys(p.JobEnv) {
			fmt.Fprintf(&b, "  %s=%s\n", k, cluster.Escape(cluster.ShellQuote(opt.value(k, p.JobEnv[k]))))
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// RenderEnv writes, for each process, a comment naming it, one
// `export NAME='value'` line per variable (sorted) and `cd WORKDIR && CMD`.
// Every value is single-quoted, so it reaches the process byte for byte:
// spaces, quotes, $() and newlines included. A relative workdir is
// written under "$HOME", so the block works from any directory.
func RenderEnv(w io.Writer, p *Plan, opt RenderOptions) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# drover plan: job %s (%s), %d %s\n", p.Job, p.Framework,
		len(p.Processes), plural(len(p.Processes), "process", "processes"))
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "# note: %s\n", strings.ReplaceAll(n, "\n", " "))
	}
	for _, pr := range p.Processes {
		fmt.Fprintf(&b, "\n# %s on %s (%s)\n", pr.Name(), pr.Host.Name, pr.Address)
		for _, k := range sortedKeys(pr.Env) {
			v := singleQuote(opt.value(k, pr.Env[k]))
			if (homePaths[k] || strings.HasPrefix(k, "DROVER_DATA_")) && strings.HasPrefix(pr.Env[k], "~") {
				// Without a probe the home directory is unknown and the
				// plan says "~/..."; quoted, ~ would reach the process
				// literally.
				v = cdTarget(pr.Env[k])
			}
			if val := opt.value(k, pr.Env[k]); strings.ContainsFunc(val, isControl) {
				// Quoted as it is, an escape sequence in a value would
				// drive the terminal that shows the plan: printf makes
				// it from its octal code instead (the '.' keeps trailing
				// newlines from $(...)).
				fmt.Fprintf(&b, "%s=$(printf '%%b.' %s); export %s=\"${%s%%.}\"\n", k, singleQuote(printfEscape(val)), k, k)
				continue
			}
			fmt.Fprintf(&b, "export %s=%s\n", k, v)
		}
		fmt.Fprintf(&b, "cd %s && %s\n", cdTarget(pr.Workdir), shellJoin(pr.Command))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// homePaths are the variables whose value drover makes from a path on the
// host, "~/..." when the plan does not know the host's home directory:
// RenderEnv writes them under "$HOME" so that the shell expands them. A
// value from [job.env] is the user's and stays literal (these names are
// reserved, so it cannot be one of them).
var homePaths = map[string]bool{
	"DROVER_CHECKPOINT_DIR": true, "TORCHELASTIC_ERROR_FILE": true,
	"DROVER_PROGRESS_FILE": true, "DROVER_RESUME_FROM": true,
	// drover's stack hook, and on PYTHONPATH its directory first (what
	// [job.env] adds follows it).
	"DROVER_STACKS_DIR": true, "PYTHONPATH": true,
}

// jsonPlan and jsonProcess fix the JSON field names; they are an interface
// for scripts and change only by adding fields.
type jsonPlan struct {
	Job       string        `json:"job"`
	Framework string        `json:"framework"`
	Processes []jsonProcess `json:"processes"`
	Notes     []string      `json:"notes"`
}

type jsonProcess struct {
	Name         string            `json:"name"`
	Host         string            `json:"host"`
	Address      string            `json:"address"`
	Role         string            `json:"role"`
	Index        int               `json:"index"`
	Rank         int               `json:"rank"`
	LocalRank    int               `json:"local_rank"`
	NodeRank     int               `json:"node_rank"`
	GPUs         []int             `json:"gpus"`
	GPUsUnprobed bool              `json:"gpus_unprobed,omitempty"`
	Port         int               `json:"port"`
	Workdir      string            `json:"workdir"`
	Env          map[string]string `json:"env"`
	Command      []string          `json:"command"`
}

// RenderJSON writes the plan as indented JSON. Ranks that do not apply are
// -1; gpus is always a list.
func RenderJSON(w io.Writer, p *Plan, opt RenderOptions) error {
	out := jsonPlan{Job: p.Job, Framework: string(p.Framework),
		Processes: []jsonProcess{}, Notes: append([]string{}, p.Notes...)}
	for _, pr := range p.Processes {
		env := make(map[string]string, len(pr.Env))
		for k, v := range pr.Env {
			env[k] = opt.value(k, v)
		}
		out.Processes = append(out.Processes, jsonProcess{
			Name: pr.Name(), Host: pr.Host.Name, Address: pr.Address, Role: string(pr.Role),
			Index: pr.Index, Rank: pr.Rank, LocalRank: pr.LocalRank, NodeRank: pr.NodeRank,
			GPUs:         append([]int{}, pr.GPUs...),
			GPUsUnprobed: len(pr.GPUs) == 0 && slices.Contains(p.Unprobed, pr.Host.Name),
			Port:         pr.Port, Workdir: pr.Workdir, Env: env,
			Command: append([]string{}, pr.Command...),
		})
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// singleQuote quotes s for a POSIX shell: inside single quotes nothing is
// special, and each quote in s becomes quote, backslash, quote, quote
// (close the quoting, an escaped quote, reopen).
// isControl reports the characters a terminal acts on that a value may
// still hold literally in a shell line: all but newline and tab.
func isControl(r rune) bool {
	return r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0))
}

// printfEscape writes s for printf's %b: backslashes doubled, control
// bytes as \0NNN octal, the rest as it is.
func printfEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c != '\n' && c != '\t' && (c < 0x20 || c == 0x7f):
			fmt.Fprintf(&b, `\0%03o`, c)
		case c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] < 0xa0: // a C1 control in UTF-8
			fmt.Fprintf(&b, `\0%03o\0%03o`, c, s[i+1])
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func singleQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = cluster.ShellQuote(a)
	}
	return strings.Join(q, " ")
}

// cdTarget is the argument of cd for a workdir: absolute as is, relative
// (or "~/...") under "$HOME".
func cdTarget(workdir string) string {
	if strings.HasPrefix(workdir, "/") {
		return cluster.ShellQuote(workdir)
	}
	rel := homeRelative(workdir)
	if rel == "" || rel == "." {
		return `"$HOME"`
	}
	return `"$HOME"/` + cluster.ShellQuote(rel)
}

func sameCommand(ps []Process) bool {
	if len(ps) == 0 {
		return true
	}
	for _, pr := range ps[1:] {
		if !slices.Equal(pr.Command, ps[0].Command) {
			return false
		}
	}
	return true
}

func joinHostPortStr(addr, port string) string {
	if strings.Contains(addr, ":") {
		return "[" + addr + "]:" + port
	}
	return addr + ":" + port
}

func dash(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func nonZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
