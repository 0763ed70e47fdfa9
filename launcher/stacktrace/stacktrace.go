package stacktrace

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Frame is one frame of a Python stack.
type Frame struct {
	Func string
	File string
	Line int
}

// String is "func (file:line)", the file's base name only.
func (f Frame) String() string {
	file := f.File
	if i := strings.LastIndexByte(file, '/'); i >= 0 {
		file = file[i+1:]
	}
	return fmt.Sprintf("%s (%s:%d)", f.Func, file, f.Line)
}

// Thread is one thread's frames, innermost first.
type Thread struct {
	Header string
	Main   bool // py-spy named it MainThread, or faulthandler's current one
	Frames []Frame
}

var (
	// faulthandler: `  File "/w/train.py", line 42 in stuck_in_data_loader`
	fhFrame = regexp.MustCompile(`^\s+File "(.*)", line (\d+) in (\S+)`)
	// py-spy: `    stuck_in_data_loader (train.py:42)`, native ones too.
	spyFrame = regexp.MustCompile(`^\s+(\S+) \((.*):(\d+)\)\s*$`)
)

// Parse reads text as faulthandler's or py-spy's dump: a header line per
// thread, then its frames, innermost first. Lines of neither kind are
// skipped.
func Parse(text string) []Thread {
	var threads []Thread
	for _, line := range strings.Split(text, "\n") {
		if m := fhFrame.FindStringSubmatch(line); m != nil && len(threads) > 0 {
			n, _ := strconv.Atoi(m[2])
			t := &threads[len(threads)-1]
			t.Frames = append(t.Frames, Frame{Func: m[3], File: m[1], Line: n})
			continue
		}
		if m := spyFrame.FindStringSubmatch(line); m != nil && len(threads) > 0 {
			n, _ := strconv.Atoi(m[3])
			t := &threads[len(threads)-1]
			t.Frames = append(t.Frames, Frame{Func: m[1], File: m[2], Line: n})
			continue
		}
		if strings.HasPrefix(line, "Thread ") || strings.HasPrefix(line, "Current thread ") || strings.HasPrefix(line, "Stack (most recent") {
			threads = append(threads, Thread{Header: line, Main: strings.Contains(line, `"MainThread"`) || strings.HasPrefix(line, "Current thread ")})
		}
	}
	return threads
}

// collectiveOps are the torch.distributed calls a rank waits for its
// peers in, by function name.
var collectiveOps = map[string]bool{
	"all_reduce": true, "all_reduce_coalesced": true, "broadcast": true, "broadcast_object_list": true,
	"barrier": true, "monitored_barrier": true, "_store_based_barrier": true,
	"all_gather": true, "all_gather_into_tensor": true, "all_gather_object": true, "_all_gather_base": true,
	"reduce_scatter": true, "reduce_scatter_tensor": true, "_reduce_scatter_base": true,
	"all_to_all": true, "all_to_all_single": true, "reduce": true, "gather": true, "scatter": true,
	"send": true, "recv": true, "batch_isend_irecv": true,
	// Waiting for the others at the rendezvous (the store's first wait).
	"init_process_group": true,
}

// inCollective names the collective f waits in ("" for none): a
// collective's function, or a wait inside torch.distributed (a c10d
// store's, a work's, NCCL's watchdog); a wait elsewhere (a queue's, a
// thread's) is no collective.
func inCollective(f Frame) string {
	if collectiveOps[f.Func] {
		return f.Func
	}
	dist := strings.Contains(f.File, "torch/distributed/") || strings.Contains(f.File, "c10d")
	switch {
	case dist && (strings.Contains(f.Func, "wait") || strings.Contains(f.Func, "barrier")):
		return f.Func
	case strings.Contains(strings.ToLower(f.Func), "watchdog") && strings.Contains(strings.ToLower(f.Func), "nccl"):
		return f.Func
	}
	return ""
}

// library says whether file is the interpreter's or an installed
// package's rather than the job's own code.
func library(file string) bool {
	return strings.Contains(file, "/site-packages/") || strings.Contains(file, "/dist-packages/") ||
		strings.Contains(file, "/lib/python3") || strings.HasPrefix(file, "<") ||
		// py-spy's short names: "torch/distributed/distributed_c10d.py".
		strings.HasPrefix(file, "torch/") || strings.Contains(file, "/torch/")
}

// Verdict is where one process's stack stands.
type Verdict struct {
	// Collective is the collective it waits in; "" when it is elsewhere.
	Collective string
	// Frame is the innermost frame of the job's own code of its main
	// thread (of its innermost frame when none is the job's).
	Frame Frame
	// Found is false when the text held no frame.
	Found bool
}

// Classify judges one process's dump.
func Classify(text string) Verdict {
	threads := Parse(text)
	var v Verdict
	for _, t := range threads {
		for _, f := range t.Frames {
			if op := inCollective(f); op != "" {
				v.Collective = op
				break
			}
		}
		if v.Collective != "" {
			break
		}
	}
	main := -1
	for i, t := range threads {
		if len(t.Frames) > 0 && (main < 0 || t.Main || !threads[main].Main) {
			main = i
		}
	}
	if main < 0 {
		return v
	}
	v.Found, v.Frame = true, threads[main].Frames[0]
	for _, f := range threads[main].Frames {
		if !library(f.File) {
			v.Frame = f
			break
		}
	}
	return v
}

// Rank is one rank's dump, as the hang verdict reads it.
type Rank struct {
	Rank  int
	Label string // "worker-4@h3"
	Stack string
	Err   string // why there is no stack
}

// Summary says which ranks are not in the collective, each with its
// frame, and which wait in which collective: "rank 4 (worker-4@h3) is not
// in the collective: stuck_in_data_loader (train.py:42); ranks 0-3, 5 wait
// in all_reduce". Ranks without a stack are named last.
func Summary(ranks []Rank) string {
	sort.SliceStable(ranks, func(i, j int) bool { return ranks[i].Rank < ranks[j].Rank })
	var elsewhere, missing []string
	waiting := map[string][]int{}
	var ops []string
	for _, r := range ranks {
		v := Classify(r.Stack)
		switch {
		case r.Err != "" || !v.Found:
			missing = append(missing, strconv.Itoa(r.Rank))
		case v.Collective != "":
			if waiting[v.Collective] == nil {
				ops = append(ops, v.Collective)
			}
			waiting[v.Collective] = append(waiting[v.Collective], r.Rank)
		default:
			elsewhere = append(elsewhere, fmt.Sprintf("rank %d (%s) is not in the collective: %s", r.Rank, r.Label, v.Frame))
		}
	}
	parts := elsewhere
	for _, op := range ops {
		rs := waiting[op]
		word := "ranks"
		if len(rs) == 1 {
			word = "rank"
		}
		parts = append(parts, fmt.Sprintf("%s %s wait in %s", word, Ranges(rs), op))
	}
	if len(missing) > 0 {
		parts = append(parts, "no stack from rank "+strings.Join(missing, ", "))
	}
	return strings.Join(parts, "; ")
}

// Ranges writes sorted ranks as "0-3, 5".
func Ranges(rs []int) string {
	var out []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j > i {
			out = append(out, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		} else {
			out = append(out, strconv.Itoa(rs[i]))
		}
		i = j + 1
	}
	return strings.Join(out, ", ")
}
