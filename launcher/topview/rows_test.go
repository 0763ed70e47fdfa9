package topview

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/top"
)

// Whatever a host sends (an error, a process name, a state) reaches the
// terminal escaped: no control character survives into a row.
func TestRowsEscapeHostText(t *testing.T) {
	step := int64(7)
	v := top.View{Job: "j\x1b]0;title\x07", Time: time.Unix(0, 0), Hosts: []top.Host{
		{Host: "h1", Error: "bad\x1b[2Jthing"},
		{Host: "h2", Reachable: true, GPUError: "nvidia-smi: \x1b[31mred\u202e", Procs: []agent.TopProc{
			{Name: "worker-0\r\x1b[1A", State: "running\x00", OutputAgeS: 2, Step: &step},
		}},
	}}
	rows := Rows(v)
	text := strings.Join(rows, "\n")
	for _, r := range text {
		if r == '\n' {
			continue
		}
		assert.False(t, r < 0x20 || r == 0x7f || r == '\u202e', "raw %U in %q", r, text)
	}
	assert.Contains(t, text, `h1               unreachable: bad\x1b[2Jthing`)
	assert.Contains(t, text, `worker-0\r\x1b[1A`)
	assert.Contains(t, text, `\u202e`)
}

// Flags name the throttle reasons worth knowing and an ECC count; a quiet
// GPU shows "-".
func TestFlags(t *testing.T) {
	bits, ecc, zero := uint64(0x40|0x80|0x1), 2.0, 0.0
	assert.Equal(t, "hw-thermal,power-brake,ecc-uncorrected=2", Flags(agent.TopGPU{Throttle: &bits, ECCVolatile: &ecc}))
	none := uint64(0x1) // idle
	assert.Equal(t, "-", Flags(agent.TopGPU{Throttle: &none, ECCVolatile: &zero}))
}

// cancelAfter is a writer that ends ctx after n writes.
type cancelAfter struct {
	b      strings.Builder // not embedded: its WriteString would bypass Write
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if c.n--; c.n <= 0 {
		c.cancel()
	}
	return c.b.Write(p)
}

func (c *cancelAfter) String() string { return c.b.String() }

// Without a terminal, top prints what --once prints, a view per refresh,
// a blank line between them, until it is stopped.
func TestPrint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAfter{n: 3, cancel: cancel}
	views := 0
	view := func() top.View {
		views++
		return top.View{Job: "j", Time: time.Date(2026, 1, 2, 3, 4, views, 0, time.UTC), Hosts: []top.Host{{Host: "h1", Error: "connecting"}}}
	}
	require.NoError(t, Print(ctx, out, view, time.Millisecond))
	var want []string
	for i := 1; i <= 3; i++ {
		want = append(want, strings.Join(Rows(top.View{Job: "j", Time: time.Date(2026, 1, 2, 3, 4, i, 0, time.UTC), Hosts: []top.Host{{Host: "h1", Error: "connecting"}}}), "\n")+"\n")
	}
	assert.Equal(t, strings.Join(want, "\n"), out.String())
	assert.Contains(t, out.String(), "drover top: j   03:04:03")
}
