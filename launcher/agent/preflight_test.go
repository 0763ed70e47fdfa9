package agent

import (
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPreflight(t *testing.T) {
	busy, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, busyPort, _ := net.SplitHostPort(busy.Addr().String())
	free, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	_, freePort, _ := net.SplitHostPort(free.Addr().String())
	free.Close()

	tests := []struct {
		name    string
		program string
		ports   []string
		wantErr []string
	}{
		{"all good", "sh", []string{freePort}, nil},
		{"missing program", "drover-no-such-program", nil, []string{"program drover-no-such-program"}},
		{"busy port", "sh", []string{busyPort}, []string{"port " + busyPort + " is not free"}},
		{"both", "./no-such-script.py", []string{busyPort, freePort}, []string{"program ./no-such-script.py", "port " + busyPort}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Preflight(tt.program, tt.ports)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	want := []string{"/d", "agent", "preflight", "--port", "29500", "--port", "29501", "--", "python3"}
	if got := PreflightCommand("/d", PreflightOptions{Program: "python3", Ports: []string{"29500", "29501"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("PreflightCommand = %q, want %q", got, want)
	}
	want = []string{"/d", "agent", "preflight", "--port", "29500", "--move-ports", "--", "python3"}
	if got := PreflightCommand("/d", PreflightOptions{Program: "python3", Ports: []string{"29500"}, MovePorts: true}); !reflect.DeepEqual(got, want) {
		t.Errorf("PreflightCommand = %q, want %q", got, want)
	}
	want = []string{"/d", "agent", "preflight", "--stop-leftovers", "/w/.drover/pids", "--grace", "2s", "--"}
	if got := PreflightCommand("/d", PreflightOptions{Leftovers: "/w/.drover/pids", Grace: 2 * time.Second}); !reflect.DeepEqual(got, want) {
		t.Errorf("PreflightCommand = %q, want %q", got, want)
	}
}

// A restart's preflight moves held ports: two consecutive free ones in
// place of a held pair, nothing when they are free.
func TestPreflightMove(t *testing.T) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	base, err := PreflightMove("sh", []string{held, "1"})
	if err != nil || base <= 0 {
		t.Fatalf("PreflightMove = %d, %v; want a port", base, err)
	}
	for _, p := range []int{base, base + 1} {
		pl, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		pl.Close()
	}
	free, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	if base, err := PreflightMove("sh", []string{strconv.Itoa(free)}); base != 0 || err != nil {
		t.Errorf("PreflightMove of a free port = %d, %v; want 0, nil", base, err)
	}
	if _, err := PreflightMove("no-such-program-here", []string{held}); err == nil || !strings.Contains(err.Error(), "no-such-program-here") {
		t.Errorf("a missing program still fails: %v", err)
	}
}
