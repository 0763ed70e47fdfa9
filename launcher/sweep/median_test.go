package sweep

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func series(vals ...float64) Series {
	var s Series
	for i, v := range vals {
		s = append(s, Point{Step: i, Value: v})
	}
	return s
}

func TestMedianShouldStop(t *testing.T) {
	good := []Series{series(2, 1, 0.5, 0.25), series(2, 1.2, 0.6, 0.3), series(2.2, 1.1, 0.55, 0.2)}
	for _, tc := range []struct {
		name      string
		goal      Goal
		min       int
		running   Series
		completed []Series
		stop      bool
	}{
		{"too few completed", Minimize, 0, series(9, 9, 9), good[:2], false},
		{"flat loss above the median", Minimize, 0, series(2.3, 2.3, 2.3), good, true},
		// at step 1 the completed averages are 1.5, 1.6, 1.65: median 1.6
		{"best so far under the median", Minimize, 0, series(2.3, 1.55), good, false},
		{"best so far just over the median", Minimize, 0, series(2.3, 1.61), good, true},
		{"no report yet", Minimize, 0, nil, good, false},
		{"min_trials 4 not reached", Minimize, 4, series(2.3, 2.3, 2.3), good, false},
		{"min_trials 2", Minimize, 2, series(9), good[:2], true},
		{"maximize: low accuracy stopped", Maximize, 0, series(0.1, 0.1), []Series{series(0.5, 0.6), series(0.4, 0.7), series(0.6, 0.8)}, true},
		{"maximize: high accuracy kept", Maximize, 0, series(0.1, 0.9), []Series{series(0.5, 0.6), series(0.4, 0.7), series(0.6, 0.8)}, false},
		// completed trials that report only from step 5 have no average at step 1
		{"completed have nothing by step s", Minimize, 0, series(9, 9), []Series{{{5, 1}}, {{5, 1}}, {{5, 1}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Median{Goal: tc.goal, MinTrials: tc.min}
			assert.Equal(t, tc.stop, m.ShouldStop(tc.running, tc.completed))
		})
	}
}
