package lighthost

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
)

// User is the login name the fleet's inventory gives (any name logs in).
const User = "drovertest"

// Fleet is n light hosts in one server, with what a client needs to reach
// them strictly: a user key, a known_hosts file and a drover inventory.
type Fleet struct {
	*Server
	Dir        string
	KeyFile    string
	KnownHosts string
	Inventory  string
}

// NewFleet starts n hosts named "<name>-h<i>" on 127.0.0.1, each with its
// home under dir/hosts, and writes id_ed25519, known_hosts and fleet.toml
// into dir. shell is the login shell ("" for /bin/sh). The caller closes it.
func NewFleet(dir, name string, n int, shell string) (*Fleet, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lighthost fleet: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("lighthost fleet: user key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, fmt.Errorf("lighthost fleet: user key: %w", err)
	}
	f := &Fleet{Dir: dir, KeyFile: filepath.Join(dir, "id_ed25519"), KnownHosts: filepath.Join(dir, "known_hosts"),
		Inventory: filepath.Join(dir, "fleet.toml")}
	if err := os.WriteFile(f.KeyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, fmt.Errorf("lighthost fleet: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("lighthost fleet: user key: %w", err)
	}
	if f.Server, err = New(Options{Shell: shell, AuthorizedKey: sshPub}); err != nil {
		return nil, err
	}
	var kh, inv strings.Builder
	fmt.Fprintf(&inv, "# written by lighthost: %d light hosts\n[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n",
		n, User, f.KeyFile, f.KnownHosts)
	for i := 0; i < n; i++ {
		hn := fmt.Sprintf("%s-h%d", name, i)
		h, err := f.AddHost(hn, "127.0.0.1:0", filepath.Join(dir, "hosts", hn, "home"))
		if err != nil {
			f.Close()
			return nil, err
		}
		kh.WriteString(h.KnownHostsLine() + "\n")
		fmt.Fprintf(&inv, "\n[[host]]\nname = %q\naddress = %q\nport = %d\ngpus = []\n", hn, h.Addr.IP.String(), h.Addr.Port)
	}
	for path, text := range map[string]string{f.KnownHosts: kh.String(), f.Inventory: inv.String()} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			f.Close()
			return nil, fmt.Errorf("lighthost fleet: %w", err)
		}
	}
	return f, nil
}
