package stacktrace

import (
	"os"
	"path/filepath"
	"testing"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The texts under testdata are real dumps of drover's hook (faulthandler)
// from /usr/bin/python3 with Debian's python3-torch over gloo, and py-spy's
// format.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		file, collective, frame string
	}{
		{"faulthandler_data_loader.txt", "", "stuck_in_data_loader (train.py:5)"},
		{"faulthandler_all_reduce.txt", "all_reduce", "main (train.py:14)"},
		{"faulthandler_rendezvous.txt", "init_process_group", "main (train.py:8)"},
		// A queue's and a thread's wait are no collective.
		{"faulthandler_queue_wait.txt", "", "loader (q.py:4)"},
		{"pyspy_all_reduce.txt", "all_reduce", "main (train.py:14)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			v := Classify(read(t, tc.file))
			if !v.Found || v.Collective != tc.collective || v.Frame.String() != tc.frame {
				t.Errorf("Classify = %+v (frame %s), want collective %q, frame %s", v, v.Frame, tc.collective, tc.frame)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	reduce, stuck := read(t, "faulthandler_all_reduce.txt"), read(t, "faulthandler_data_loader.txt")
	var ranks []Rank
	for r := 5; r >= 0; r-- {
		s := reduce
		if r == 4 {
			s = stuck
		}
		ranks = append(ranks, Rank{Rank: r, Label: "worker-" + string(rune('0'+r)) + "@h" + string(rune('1'+r/2)), Stack: s})
	}
	ranks = append(ranks, Rank{Rank: 7, Label: "worker-7@h4", Err: "gone"})
	got := Summary(ranks)
	want := "rank 4 (worker-4@h3) is not in the collective: stuck_in_data_loader (train.py:5); ranks 0-3, 5 wait in all_reduce; no stack from rank 7"
	if got != want {
		t.Errorf("Summary =\n%s\nwant\n%s", got, want)
	}
}

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{3}, "3"}, {[]int{0, 1, 2, 3, 5}, "0-3, 5"}, {[]int{0, 2, 3, 7, 8, 9}, "0, 2-3, 7-9"}} {
		if got := Ranges(tc.in); got != tc.want {
			t.Errorf("Ranges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
