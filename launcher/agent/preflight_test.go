package agent

import (
	"net"
	"reflect"
	"strings"
	"testing"
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
	if got := PreflightCommand("/d", "python3", []string{"29500", "29501"}); !reflect.DeepEqual(got, want) {
		t.Errorf("PreflightCommand = %q, want %q", got, want)
	}
}
