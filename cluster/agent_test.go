package cluster

import (
	"context"
	"errors"
	"io"
	"runtime"
	"syscall"
	"testing"

	"github.com/droverhq/drover/cluster/config"
)

func TestUnamePlatform(t *testing.T) {
	tests := []struct {
		in           string
		goos, goarch string
		ok           bool
	}{
		{"Linux x86_64\n", "linux", "amd64", true},
		{"Linux aarch64", "linux", "arm64", true},
		{"Darwin arm64", "darwin", "arm64", true},
		{"Linux armv7l", "linux", "arm", true},
		{"Linux i686", "linux", "386", true},
		{"Linux ppc64le", "linux", "ppc64le", true},
		{"FreeBSD amd64", "freebsd", "amd64", true},
		{"", "", "", false},
		{"Linux", "", "", false},
		{"sh: uname: not found", "", "", false},
	}
	for _, tt := range tests {
		goos, goarch, ok := unamePlatform(tt.in)
		if goos != tt.goos || goarch != tt.goarch || ok != tt.ok {
			t.Errorf("unamePlatform(%q) = %q, %q, %v; want %q, %q, %v", tt.in, goos, goarch, ok, tt.goos, tt.goarch, tt.ok)
		}
	}
}

// unameHost is a transport whose `uname -sm` prints a fixed answer; every
// other call fails, so InstallAgent must stop at the platform check.
type unameHost struct {
	Transport
	uname string
}

func (u unameHost) Host() config.Host {
	return config.Host{Name: "h", Address: "10.0.0.1", Transport: config.TransportSSH}
}

func (u unameHost) Start(_ context.Context, c Cmd) (Process, error) {
	if len(c.Args) != 2 || c.Args[0] != "uname" {
		return nil, errors.New("unexpected command")
	}
	_, _ = io.WriteString(c.Stdout, u.uname)
	return doneProcess{}, nil
}

func (u unameHost) FS(context.Context) (FS, error) { return nil, errors.New("no file access expected") }

type doneProcess struct{}

func (doneProcess) Wait() error { return nil }

func (doneProcess) Signal(syscall.Signal) error { return nil }

func TestInstallAgentRefusesOtherPlatform(t *testing.T) {
	other := "Linux aarch64\n"
	if runtime.GOARCH == "arm64" {
		other = "Linux x86_64\n"
	}
	for _, uname := range []string{other, "Darwin x86_64\n", "garbage\n"} {
		_, err := InstallAgent(context.Background(), unameHost{uname: uname}, "/nonexistent")
		if !errors.Is(err, ErrAgentUnsupported) {
			t.Errorf("uname %q: err %v, want ErrAgentUnsupported", uname, err)
		}
	}
}
