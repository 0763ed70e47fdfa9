package remote

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

func TestUnamePlatform(t *testing.T) {
	tests := []struct {
		in   string
		want Platform
		ok   bool
	}{
		{"Linux x86_64\n", "linux/amd64", true},
		{"Linux aarch64", "linux/arm64", true},
		{"Darwin arm64", "darwin/arm64", true},
		{"Linux armv7l", "linux/arm", true},
		{"Linux armv8l", "linux/arm", true},
		{"Linux i686", "linux/386", true},
		{"Linux ppc64le", "linux/ppc64le", true},
		{"FreeBSD amd64", "freebsd/amd64", true},
		{"", "", false},
		{"Linux", "", false},
		{"sh: uname: not found", "", false},
	}
	for _, tt := range tests {
		got, ok := unamePlatform(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("unamePlatform(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// unameHost is a transport whose install command (`uname -sm` first) prints
// a fixed answer; every other call fails, so Install must stop at choosing
// the agent.
type unameHost struct {
	cluster.Transport
	uname string
}

func (u unameHost) Host() cluster.Endpoint {
	return cluster.Endpoint{Name: "h", Address: "10.0.0.1", Transport: cluster.TransportSSH}
}

func (u unameHost) Start(_ context.Context, c cluster.Cmd) (cluster.Process, error) {
	if len(c.Args) < 3 || c.Args[0] != "sh" || !strings.Contains(c.Args[2], "\nuname -sm\n") {
		return nil, errors.New("unexpected command")
	}
	_, _ = io.WriteString(c.Stdout, cluster.LoginMarker+"\n"+u.uname)
	return doneProcess{}, nil
}

func (u unameHost) FS(context.Context) (cluster.FS, error) {
	return nil, errors.New("no file access expected")
}

type doneProcess struct{}

func (doneProcess) Wait() error { return nil }

func (doneProcess) Signal(syscall.Signal) error { return nil }

// A host whose platform has no agent fails with *NoAgentError, whose
// message names the command that builds the missing agent; one that is not
// Linux is told agents are Linux only.
func TestInstallNoAgentForPlatform(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	agents := FindAgents(self)
	other := "Linux ppc64le\n"
	tests := []struct {
		uname string
		want  string
	}{
		{other, "host h is linux/ppc64le and this drover has no agent for it (it has linux/" + runtime.GOARCH +
			"): build one with `CGO_ENABLED=0 GOOS=linux GOARCH=ppc64le go build -o " +
			filepath.Join(filepath.Dir(self), "drover-agent-linux-ppc64le") + " ./cmd/drover` in drover's source, or run `make build`"},
		{"Darwin x86_64\n", "host h is darwin/amd64: drover agents run on Linux only (this drover has agents for linux/" + runtime.GOARCH + ")"},
	}
	for _, tt := range tests {
		_, err := Install(context.Background(), unameHost{uname: tt.uname}, agents)
		var na *NoAgentError
		if assert.ErrorAs(t, err, &na, tt.uname) {
			assert.Equal(t, tt.want, na.Error())
		}
	}
	_, err = Install(context.Background(), unameHost{uname: "garbage\n"}, agents)
	assert.ErrorContains(t, err, `uname -sm printed "garbage", want an OS and a machine`)
}
