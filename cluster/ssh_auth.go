package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"sync/atomic"

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
	// err is a failure of this machine's, not of a key: out of file
	// descriptors (TooManyOpenFilesError). The dial fails with it rather
	// than with "no usable key".
	err error
}

// close releases the agent connection, needed only during authentication.
func (a *authSet) close() {
	if a.agent != nil {
		a.agent.Close()
	}
}

// authError is the AuthError for user when the host refused every key in a.
func (a *authSet) authError(user string, err error) *AuthError {
	return &AuthError{User: user, Tried: a.tried, Skipped: a.skipped, Err: err}
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
		if IsTooManyOpenFiles(err) {
			a.err = NameOpenFiles("connect to ssh-agent "+agentSock, err)
			return a
		}
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
		if IsTooManyOpenFiles(err) {
			a.err = NameOpenFiles("read identity file "+path, err)
			a.close()
			return a
		}
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
		if cs := certSigner(path+"-cert.pub", signer, &a.skipped); cs != nil {
			a.signers = append(a.signers, cs)
			a.tried = append(a.tried, path+"-cert.pub")
		}
		a.signers = append(a.signers, signer)
		a.tried = append(a.tried, path)
	}
	a.addCertificateFiles(t.certificateFiles)
	return a
}

// certSigner returns signer presenting the user certificate in file (as
// ssh does with a "-cert.pub" beside a key), or nil when there is none or it
// is not a certificate of signer's key (noted in skipped).
func certSigner(file string, signer ssh.Signer, skipped *[]string) ssh.Signer {
	cert, err := readCertificate(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		*skipped = append(*skipped, err.Error())
		return nil
	}
	if !bytes.Equal(cert.Key.Marshal(), signer.PublicKey().Marshal()) {
		*skipped = append(*skipped, file+": certificate of another key")
		return nil
	}
	cs, err := ssh.NewCertSigner(cert, signer)
	if err != nil {
		*skipped = append(*skipped, fmt.Sprintf("%s: %v", file, err))
		return nil
	}
	return cs
}

// readCertificate reads an OpenSSH user certificate (KEY-cert.pub).
func readCertificate(file string) (*ssh.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	cert, ok := pub.(*ssh.Certificate)
	if !ok {
		return nil, fmt.Errorf("%s: not a certificate", file)
	}
	return cert, nil
}

// addCertificateFiles puts the certificates of ssh_config's CertificateFile
// first, each paired with the key (from the agent or an identity file) it
// certifies, as ssh does.
func (a *authSet) addCertificateFiles(files []string) {
	var certs []ssh.Signer
	for _, f := range files {
		found := false
		for _, s := range a.signers {
			if _, isCert := s.PublicKey().(*ssh.Certificate); isCert {
				continue
			}
			var skipped []string
			if cs := certSigner(f, s, &skipped); cs != nil {
				certs = append(certs, cs)
				a.tried = append(a.tried, f)
				found = true
				break
			}
		}
		if !found {
			a.skipped = append(a.skipped, f+": no key for this certificate")
		}
	}
	a.signers = append(certs, a.signers...)
}

// methods is the ssh.AuthMethod list for ClientConfig.
func (a *authSet) methods() []ssh.AuthMethod {
	if len(a.signers) == 0 {
		return nil
	}
	return []ssh.AuthMethod{ssh.PublicKeys(a.signers...)}
}

// errAuthExhausted ends a handshake whose host accepted none of the methods
// drover offered; handshake turns it into an *AuthError.
var errAuthExhausted = errors.New("no authentication method left to try")

// callback is the ClientConfig.AuthCallback: it runs only in the
// authentication phase, after each refused attempt, and ends the handshake
// with errAuthExhausted when none of drover's methods is left untried among
// those the host allows, so that a refusal is told apart from a network
// failure by type rather than by the library's message. started records
// that authentication began.
func (a *authSet) callback(started *atomic.Bool) ssh.ClientAuthCallback {
	return func(ctx *ssh.ClientAuthContext) (ssh.AuthMethod, error) {
		started.Store(true)
		if len(a.signers) > 0 && slices.Contains(ctx.AllowedMethods, "publickey") && !slices.Contains(ctx.TriedMethods, "publickey") {
			return nil, nil // config.Auth's publickey comes next
		}
		return nil, errAuthExhausted
	}
}
