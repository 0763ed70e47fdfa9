package examples_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logWrites loads only the log function of a train.py (the scripts import
// frameworks that may not be installed), calls it with two arguments (one
// for a log(msg)) and prints the write calls it made to sys.stdout, one
// repr per line.
const logWrites = `
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "log")
ns = {"sys": sys}
exec(compile(ast.Module(body=[fn], type_ignores=[]), sys.argv[1], "exec"), ns)
class Recorder:
    def __init__(self): self.writes = []
    def write(self, s): self.writes.append(s); return len(s)
    def flush(self): pass
rec, real = Recorder(), sys.stdout
sys.stdout = rec
log = ns["log"]
if fn.args.vararg:
    log("rank 3/6", "local_rank 1")
else:
    log("rank 3/6 local_rank 1")
sys.stdout = real
for w in rec.writes:
    print(repr(w))
`

// TestTrainLogsOneWritePerLine: the examples' log lines are each one
// write. Under torchrun a host's workers share one stdout, and print()
// under python3 -u writes the text and its newline apart, so two ranks'
// lines interleaved mid-line (CI saw "restart=1rank 2/6 ..."). A write of
// a short line to a pipe is atomic.
func TestTrainLogsOneWritePerLine(t *testing.T) {
	_, err := os.Stat(hostPython)
	testenv.Need(t, hostPython, err)
	for _, script := range []string{
		"demo/train.py",
		"pytorch-ddp/train.py",
		"tensorflow-multiworker/train.py",
		"tensorflow-ps/train.py",
	} {
		t.Run(script, func(t *testing.T) {
			out, err := exec.Command(hostPython, "-u", "-c", logWrites, script).CombinedOutput()
			require.NoError(t, err, "%s", out)
			writes := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.Len(t, writes, 1, "one write per log line, got %q", writes)
			assert.Equal(t, `'rank 3/6 local_rank 1\n'`, writes[0])
		})
	}
}
