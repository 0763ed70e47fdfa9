package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// authSet is the public keys offered to one host, and a description of each
// source, so that "auth failed" can say which keys were tried.
type authSet struct {
	signers []ssh.Signer
	tried   []string // "agent $SOCK (2 keys)", "/home/u/.ssh/id_ed25519"
	skipped []string // "/x/id_rsa: encrypted (add it to ssh-agent)"
	agent   net.Conn // closed once the handshake is over
}

// close releases the agent connection, needed only during authentication.
func (a *authSet) close() {
	if a.agent != nil {
		a.agent.Close()
	}
}

// describe lists what was offered, for an authentication failure.
func (a *authSet) describe() string {
	var parts []string
	if len(a.tried) > 0 {
		parts = append(parts, "tried "+strings.Join(a.tried, ", "))
	} else {
		parts = append(parts, "no usable key (set identity_file, or start ssh-agent and ssh-add a key)")
	}
	if len(a.skipped) > 0 {
		parts = append(parts, "skipped "+strings.Join(a.skipped, "; "))
	}
	return strings.Join(parts, "; ")
}

// loadAuth gathers the agent's keys (agentSock "" = $SSH_AUTH_SOCK, "none"
// = no agent) followed by the target's identity files. Keys that cannot be
// used (missing default files, passphrase-protected keys) are skipped, not
// fatal: another key may well work, and the final error lists them.
func loadAuth(t sshTarget, agentSock string) *authSet {
	a := &authSet{}
	if agentSock == "" {
		agentSock = os.Getenv("SSH_AUTH_SOCK")
	}
	if agentSock != "" && agentSock != "none" {
		conn, err := net.Dial("unix", agentSock)
		if err != nil {
			a.skipped = append(a.skipped, fmt.Sprintf("agent %s: %v", agentSock, err))
		} else {
			signers, err := agent.NewClient(conn).Signers()
			if err != nil {
				conn.Close()
				a.skipped = append(a.skipped, fmt.Sprintf("agent %s: %v", agentSock, err))
			} else {
				a.agent = conn
				a.signers = append(a.signers, signers...)
				a.tried = append(a.tried, fmt.Sprintf("agent %s (%d keys)", agentSock, len(signers)))
			}
		}
	}
	for _, path := range t.identityFiles {
		data, err := os.ReadFile(path)
		if err != nil {
			if t.explicitIdentity || !errors.Is(err, fs.ErrNotExist) {
				a.skipped = append(a.skipped, fmt.Sprintf("%s: %v", path, err))
			}
			continue
		}
		signer, err := ssh.ParsePrivateKey(data)
		var pm *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			a.skipped = append(a.skipped, path+": encrypted with a passphrase (add it to ssh-agent)")
			continue
		case err != nil:
			a.skipped = append(a.skipped, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		a.signers = append(a.signers, signer)
		a.tried = append(a.tried, path)
	}
	return a
}

// methods is the ssh.AuthMethod list for ClientConfig.
func (a *authSet) methods() []ssh.AuthMethod {
	if len(a.signers) == 0 {
		return nil
	}
	return []ssh.AuthMethod{ssh.PublicKeys(a.signers...)}
}
