package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/droverhq/drover/cluster/config"
	"github.com/kevinburke/ssh_config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveTarget(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	cfg, err := ssh_config.Decode(strings.NewReader(`
Host gpu*
    HostName %h.example.com
    User alice
    Port 2200
    IdentityFile ~/.ssh/gpu_key
    IdentityFile %d/second
    ProxyJump bastion
    UserKnownHostsFile ~/kh1 ~/kh2

Host direct
    ProxyJump none
`))
	require.NoError(t, err)
	me := currentUser()
	for _, tc := range []struct {
		name string
		host config.Host
		cfg  *ssh_config.Config
		want sshTarget
	}{
		{
			name: "defaults",
			host: config.Host{Name: "h0", Address: "10.0.0.1"},
			want: sshTarget{name: "h0", hostname: "10.0.0.1", port: 22, user: me,
				identityFiles: []string{home + "/.ssh/id_ed25519", home + "/.ssh/id_ecdsa", home + "/.ssh/id_rsa"},
				knownHosts:    []string{home + "/.ssh/known_hosts"}},
		},
		{
			name: "config fills the gaps",
			host: config.Host{Name: "g1", Address: "gpu1"},
			cfg:  cfg,
			want: sshTarget{name: "g1", hostname: "gpu1.example.com", port: 2200, user: "alice",
				identityFiles: []string{home + "/.ssh/gpu_key", home + "/second"}, explicitIdentity: true,
				knownHosts: []string{home + "/kh1", home + "/kh2"}, proxyJump: "bastion"},
		},
		{
			name: "inventory wins",
			host: config.Host{Name: "g1", Address: "gpu1", User: "bob", Port: 22, IdentityFile: "/k", KnownHosts: "/kh", ProxyJump: "j"},
			cfg:  cfg,
			want: sshTarget{name: "g1", hostname: "gpu1.example.com", port: 22, user: "bob",
				identityFiles: []string{"/k"}, explicitIdentity: true, knownHosts: []string{"/kh"}, proxyJump: "j"},
		},
		{
			name: "ProxyJump none",
			host: config.Host{Name: "d", Address: "direct", User: "u", Port: 22, IdentityFile: "/k", KnownHosts: "/kh"},
			cfg:  cfg,
			want: sshTarget{name: "d", hostname: "direct", port: 22, user: "u",
				identityFiles: []string{"/k"}, explicitIdentity: true, knownHosts: []string{"/kh"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveTarget(tc.host, tc.cfg)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestResolveTargetBadPort(t *testing.T) {
	cfg, err := ssh_config.Decode(strings.NewReader("Host x\n    Port http\n"))
	require.NoError(t, err)
	_, err = resolveTarget(config.Host{Name: "x", Address: "x"}, cfg)
	assert.ErrorContains(t, err, `Port "http"`)
}

func TestLoadSSHConfig(t *testing.T) {
	cfg, err := loadSSHConfig("none")
	require.NoError(t, err)
	assert.Nil(t, cfg)
	cfg, err = loadSSHConfig(filepath.Join(t.TempDir(), "missing"))
	require.NoError(t, err, "a missing config is no config")
	assert.Nil(t, cfg)
	p := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(p, []byte("Host a\n  User z\n"), 0o600))
	cfg, err = loadSSHConfig(p)
	require.NoError(t, err)
	u, _ := cfg.Get("a", "User")
	assert.Equal(t, "z", u)
}

func TestJumpHost(t *testing.T) {
	target := config.Host{Name: "t", IdentityFile: "/id", KnownHosts: "/kh"}
	inv := []config.Host{{Name: "bastion", Address: "10.0.0.1", User: "ops", Port: 2222}}
	for _, tc := range []struct {
		spec    string
		want    config.Host
		wantErr string
	}{
		{spec: "bastion", want: config.Host{Name: "bastion", Address: "10.0.0.1", User: "ops", Port: 2222, Transport: config.TransportSSH}},
		{spec: "u@j.example.com:2022", want: config.Host{Name: "j.example.com", Address: "j.example.com", User: "u", Port: 2022, Transport: config.TransportSSH, IdentityFile: "/id", KnownHosts: "/kh"}},
		{spec: "j.example.com", want: config.Host{Name: "j.example.com", Address: "j.example.com", Transport: config.TransportSSH, IdentityFile: "/id", KnownHosts: "/kh"}},
		{spec: "[::1]:22", want: config.Host{Name: "::1", Address: "::1", Port: 22, Transport: config.TransportSSH, IdentityFile: "/id", KnownHosts: "/kh"}},
		{spec: "a@first,bastion", want: config.Host{Name: "bastion", Address: "10.0.0.1", User: "ops", Port: 2222, Transport: config.TransportSSH, ProxyJump: "a@first"}},
		{spec: "j:notaport", wantErr: "bad port"},
		{spec: "u@", wantErr: "no host"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := jumpHost(tc.spec, target, inv)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestExpandSSHTokens(t *testing.T) {
	t.Setenv("HOME", "/home/me")
	for _, tc := range []struct{ in, want string }{
		{"~", "/home/me"},
		{"~/.ssh/id", "/home/me/.ssh/id"},
		{"%d/k_%h_%r", "/home/me/k_host_remote"},
		{"100%%", "100%"},
		{"%z", "%z"},
		{"/plain", "/plain"},
	} {
		assert.Equal(t, tc.want, expandSSHTokens(tc.in, "host", "remote"), tc.in)
	}
}
