package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/droverhq/drover/internal/testenv"
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
		host Endpoint
		cfg  *ssh_config.Config
		want sshTarget
	}{
		{
			name: "defaults",
			host: Endpoint{Name: "h0", Address: "10.0.0.1"},
			want: sshTarget{name: "h0", alias: "10.0.0.1", hostname: "10.0.0.1", port: 22, user: me,
				identityFiles: []string{home + "/.ssh/id_ed25519", home + "/.ssh/id_ecdsa", home + "/.ssh/id_rsa"},
				knownHosts:    []string{home + "/.ssh/known_hosts"}},
		},
		{
			name: "config fills the gaps",
			host: Endpoint{Name: "g1", Address: "gpu1"},
			cfg:  cfg,
			want: sshTarget{name: "g1", alias: "gpu1", hostname: "gpu1.example.com", port: 2200, user: "alice",
				identityFiles: []string{home + "/.ssh/gpu_key", home + "/second"}, explicitIdentity: true,
				knownHosts: []string{home + "/kh1", home + "/kh2"}, proxyJump: "bastion"},
		},
		{
			name: "inventory wins",
			host: Endpoint{Name: "g1", Address: "gpu1", User: "bob", Port: 22, IdentityFile: "/k", KnownHosts: "/kh", ProxyJump: "j"},
			cfg:  cfg,
			want: sshTarget{name: "g1", alias: "gpu1", hostname: "gpu1.example.com", port: 22, user: "bob",
				identityFiles: []string{"/k"}, explicitIdentity: true, knownHosts: []string{"/kh"}, proxyJump: "j"},
		},
		{
			name: "ProxyJump none",
			host: Endpoint{Name: "d", Address: "direct", User: "u", Port: 22, IdentityFile: "/k", KnownHosts: "/kh"},
			cfg:  cfg,
			want: sshTarget{name: "d", alias: "direct", hostname: "direct", port: 22, user: "u",
				identityFiles: []string{"/k"}, explicitIdentity: true, knownHosts: []string{"/kh"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveTarget(context.Background(), tc.host, parsedConfig(tc.cfg))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestResolveTargetBadPort(t *testing.T) {
	cfg, err := ssh_config.Decode(strings.NewReader("Host x\n    Port http\n"))
	require.NoError(t, err)
	_, err = resolveTarget(context.Background(), Endpoint{Name: "x", Address: "x"}, parsedConfig(cfg))
	assert.ErrorContains(t, err, `Port "http"`)
}

// parsedConfig wraps a parsed file as resolveTarget takes it; nil is none.
func parsedConfig(c *ssh_config.Config) *sshConfig {
	if c == nil {
		return nil
	}
	return &sshConfig{parsed: c}
}

func TestLoadSSHConfig(t *testing.T) {
	opts := DialOptions{SSHConfigPath: "none"}.withDefaults()
	cfg, err := loadSSHConfig(opts)
	require.NoError(t, err)
	assert.Nil(t, cfg)
	opts.SSHConfigPath = filepath.Join(t.TempDir(), "missing")
	cfg, err = loadSSHConfig(opts)
	require.NoError(t, err, "a missing config is no config")
	assert.Nil(t, cfg)
	opts.SSHConfigPath = filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(opts.SSHConfigPath, []byte("Host a\n  User z\n"), 0o600))
	cfg, err = loadSSHConfig(opts)
	require.NoError(t, err)
	u, err := cfg.values(context.Background(), Endpoint{}, "a", "User")
	require.NoError(t, err)
	assert.Equal(t, []string{"z"}, u)
}

// TestSSHConfigUnevaluable: a file with Match criteria the parser cannot
// evaluate (Match exec, Match final) is resolved by OpenSSH's client when
// one is installed, honouring those blocks; without one, the blocks are
// ignored with one warning each naming file and line, and the rest of the
// file still applies.
func TestSSHConfigUnevaluable(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	path := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(path, []byte(`
Match exec "true"
    User fromexec
Host gpu*
    HostName %h.example.com
    Port 2200
Match final all
    IdentityFile ~/.ssh/final_key
`), 0o600))
	h := Endpoint{Name: "g1", Address: "gpu1"}
	t.Run("ssh -G", func(t *testing.T) {
		testenv.LookPath(t, "ssh") // openssh-client
		var warnings []string
		opts := DialOptions{SSHConfigPath: path, Warn: func(m string) { warnings = append(warnings, m) }}.withDefaults()
		cfg, err := loadSSHConfig(opts)
		require.NoError(t, err)
		got, err := resolveTarget(context.Background(), h, cfg)
		require.NoError(t, err)
		assert.Equal(t, "gpu1.example.com", got.hostname)
		assert.Equal(t, 2200, got.port)
		assert.Equal(t, "fromexec", got.user, "Match exec evaluated by ssh")
		assert.Equal(t, []string{home + "/.ssh/final_key"}, got.identityFiles, "Match final evaluated by ssh")
		assert.Equal(t, []string{home + "/.ssh/known_hosts"}, got.knownHosts, "OpenSSH's defaults are not taken for the config's")
		assert.Empty(t, warnings)
	})
	t.Run("ssh -G fails", func(t *testing.T) {
		var warnings []string
		opts := DialOptions{SSHConfigPath: path, OpenSSH: "false", Warn: func(m string) { warnings = append(warnings, m) }}.withDefaults()
		cfg, err := loadSSHConfig(opts)
		require.NoError(t, err)
		for range 2 {
			got, err := resolveTarget(context.Background(), h, cfg)
			require.NoError(t, err, "falls back to the file without what drover cannot evaluate")
			assert.Equal(t, "gpu1.example.com", got.hostname)
			assert.Equal(t, 2200, got.port)
		}
		require.Len(t, warnings, 1, "%q", warnings)
		assert.Contains(t, warnings[0], path+": ")
		assert.Contains(t, warnings[0], "-G failed")
	})
	t.Run("no ssh client", func(t *testing.T) {
		var warnings []string
		opts := DialOptions{SSHConfigPath: path, OpenSSH: "none", Warn: func(m string) { warnings = append(warnings, m) }}.withDefaults()
		opts.SSHConfigs = &SSHConfigs{}
		for range 3 {
			cfg, err := loadSSHConfig(opts)
			require.NoError(t, err)
			got, err := resolveTarget(context.Background(), h, cfg)
			require.NoError(t, err)
			assert.Equal(t, "gpu1.example.com", got.hostname)
			assert.Equal(t, 2200, got.port)
			assert.Equal(t, currentUser(), got.user, "the Match exec block is ignored")
		}
		require.Len(t, warnings, 2, "once per block: %q", warnings)
		assert.Contains(t, warnings[0], path+":2: ignoring the block `Match exec \"true\"`")
		assert.Contains(t, warnings[1], path+":7: ignoring the block `Match final all`")
	})
}

func TestJumpHost(t *testing.T) {
	target := Endpoint{Name: "t", IdentityFile: "/id", KnownHosts: "/kh"}
	inv := []Endpoint{{Name: "bastion", Address: "10.0.0.1", User: "ops", Port: 2222}}
	for _, tc := range []struct {
		spec    string
		want    Endpoint
		wantErr string
	}{
		{spec: "bastion", want: Endpoint{Name: "bastion", Address: "10.0.0.1", User: "ops", Port: 2222, Transport: TransportSSH}},
		{spec: "u@j.example.com:2022", want: Endpoint{Name: "j.example.com", Address: "j.example.com", User: "u", Port: 2022, Transport: TransportSSH, IdentityFile: "/id", KnownHosts: "/kh"}},
		{spec: "j.example.com", want: Endpoint{Name: "j.example.com", Address: "j.example.com", Transport: TransportSSH, IdentityFile: "/id", KnownHosts: "/kh"}},
		{spec: "[::1]:22", want: Endpoint{Name: "::1", Address: "::1", Port: 22, Transport: TransportSSH, IdentityFile: "/id", KnownHosts: "/kh"}},
		{spec: "a@first,bastion", want: Endpoint{Name: "bastion", Address: "10.0.0.1", User: "ops", Port: 2222, Transport: TransportSSH, ProxyJump: "a@first"}},
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

func TestExpandProxyCommand(t *testing.T) {
	tgt := sshTarget{alias: "gpu-a", hostname: "10.0.0.5", port: 2222, user: "trainer"}
	for _, tc := range []struct{ in, want string }{
		{"ssh -W %h:%p bastion", "ssh -W 10.0.0.5:2222 bastion"},
		{"nc %h %p # %n as %r", "nc 10.0.0.5 2222 # gpu-a as trainer"},
		{"echo 100%% %x %", "echo 100% %x %"},
		{"no tokens", "no tokens"},
	} {
		assert.Equal(t, tc.want, expandProxyCommand(tc.in, tgt), tc.in)
	}
}

// TestSSHConfigUnevaluableInclude: without an OpenSSH client, an Include
// of a file drover cannot evaluate (here a VPN check with Match exec) is
// dropped with a warning naming the line, and the rest of the file still
// applies. Before, the Include broke every connection.
func TestSSHConfigUnevaluableInclude(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	inc := filepath.Join(dir, "vpn")
	require.NoError(t, os.WriteFile(inc, []byte("Match exec \"true\"\n    User fromexec\n"), 0o600))
	for _, tc := range []struct {
		name, file, warn string
		hostname         string
	}{
		{"include", "Include " + inc + "\nHost gpu*\n    HostName %h.example.com\n", "config:1: ignoring `Include " + inc + "`", "gpu1.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config")
			require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o600))
			var warnings []string
			opts := DialOptions{SSHConfigPath: path, OpenSSH: "none", Warn: func(m string) { warnings = append(warnings, m) }}.withDefaults()
			cfg, err := loadSSHConfig(opts)
			require.NoError(t, err)
			got, err := resolveTarget(context.Background(), Endpoint{Name: "g1", Address: "gpu1"}, cfg)
			require.NoError(t, err)
			assert.Equal(t, tc.hostname, got.hostname)
			require.Len(t, warnings, 1, "%q", warnings)
			assert.Contains(t, warnings[0], tc.warn)
		})
	}
}
