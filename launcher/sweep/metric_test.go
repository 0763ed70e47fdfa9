package sweep

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCollectorLine(t *testing.T) {
	for _, tc := range []struct {
		name, regex, line string
		want              []Reading
	}{
		{"one pair", "", "loss=0.5", []Reading{{"loss", 0.5, -1}}},
		{"step gives the step", "", "step=3 loss=0.25 acc=0.9", []Reading{{"loss", 0.25, 3}, {"acc", 0.9, 3}}},
		{"step after", "", "loss=1e-3, step=12", []Reading{{"loss", 0.001, 12}}},
		{"semicolons and spaces", "", "epoch 2: loss = 2.5; acc=-1", []Reading{{"loss", 2.5, -1}, {"acc", -1, -1}}},
		{"not a number", "", "loss=high lr=0.1", []Reading{{"lr", 0.1, -1}}},
		{"glued is not a pair", "", "xloss=1.5y", nil},
		{"path-like name", "", "val/loss=0.75", []Reading{{"val/loss", 0.75, -1}}},
		{"nothing", "", "Epoch 1 done", nil},
		{"regex named", `(?P<name>\w+): (?P<value>[\d.]+)`, "loss: 0.5 acc: 0.75", []Reading{{"loss", 0.5, -1}, {"acc", 0.75, -1}}},
		{"regex positional", `\[(\w+) ([\d.]+)\]`, "[loss 1.5]", []Reading{{"loss", 1.5, -1}}},
		{"regex step group", `it (?P<step>\d+) (?P<name>\w+)=(?P<value>[\d.]+)`, "it 7 loss=0.5", []Reading{{"loss", 0.5, 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCollector(tc.regex)
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.Line(tc.line))
		})
	}
}

func TestCollectorBadRegex(t *testing.T) {
	for _, re := range []string{`(`, `loss=(\d+)`} {
		_, err := NewCollector(re)
		var se *Error
		require.True(t, errors.As(err, &se), "%v", err)
		assert.Equal(t, "--metric-regex", se.Source)
		assert.Contains(t, se.Fix, "(?P<name>")
	}
}

func TestSeries(t *testing.T) {
	c, err := NewCollector("")
	require.NoError(t, err)
	var s Series
	for _, l := range []string{"loss=3", "acc=0.5", "loss=2", "step=10 loss=4", "loss=1"} {
		s.Add("loss", c.Line(l))
	}
	assert.Equal(t, Series{{0, 3}, {1, 2}, {10, 4}, {11, 1}}, s, "a reading without a step comes after the last")
	last, ok := s.Last()
	assert.True(t, ok)
	assert.Equal(t, 1.0, last)
	assert.Equal(t, 11, s.Steps())
	b, _ := Minimize.Best(s)
	assert.Equal(t, 1.0, b)
	b, _ = Maximize.Best(s)
	assert.Equal(t, 4.0, b)
}

// An adopted trial's output repeats what its record's series holds (the
// whole log, when the resume runs on another machine): the reports whose
// step is not past the record's last are dropped until one is, and the
// series is each step once; later repeats (a restart of the run) count.
func TestReplay(t *testing.T) {
	c, err := NewCollector("")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		lines []string
		want  Series
	}{
		{"the whole log again", []string{"step=1 loss=5", "step=2 loss=4", "step=3 loss=3", "step=4 loss=2", "step=5 loss=1"},
			Series{{1, 5}, {2, 4}, {3, 3}, {4, 2}, {5, 1}}},
		{"from where the record ends", []string{"step=4 loss=2", "step=5 loss=1"}, Series{{1, 5}, {2, 4}, {3, 3}, {4, 2}, {5, 1}}},
		{"a gap", []string{"step=5 loss=1"}, Series{{1, 5}, {2, 4}, {3, 3}, {5, 1}}},
		{"a restart after the replay repeats steps", []string{"step=3 loss=3", "step=4 loss=2", "step=3 loss=2.5"},
			Series{{1, 5}, {2, 4}, {3, 3}, {4, 2}, {3, 2.5}}},
		{"no steps: counted on", []string{"loss=2", "loss=1"}, Series{{1, 5}, {2, 4}, {3, 3}, {4, 2}, {5, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Series{{1, 5}, {2, 4}, {3, 3}}
			r := &Replay{Last: s.Steps()}
			for _, l := range tc.lines {
				s.Add("loss", r.Filter(c.Line(l)))
			}
			assert.Equal(t, tc.want, s)
		})
	}
	var none *Replay
	assert.Len(t, none.Filter(c.Line("step=1 loss=1")), 1, "no replay: nothing dropped")
}
