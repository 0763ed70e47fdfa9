// Command sftpproxy is a hostile SFTP server for tests: it runs the real
// sftp-server and forwards the SFTP wire protocol both ways, but adds
// crafted entries ("..", "x/..", names holding NUL, newlines or terminal
// escapes) to the directory listings it is told to, as a compromised host
// could. Tests install it as one fleet host's sftp Subsystem
// (fleettest.Fleet.HostileSFTP).
//
// Usage: sftpproxy CONFIG.json [SFTP-SERVER]. CONFIG is a JSON list of
// rules {"dir": "/abs/path", "skip": N, "names": [{"name": "..", "dir":
// true}]}: the listing of dir (as the client names it, cleaned) gets the
// names added to its first batch, from its N+1-th OPENDIR on, once.
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sync"
)

const (
	fxpOpendir = 11
	fxpReaddir = 12
	fxpHandle  = 102
	fxpName    = 104
	attrPerms  = 0x4
)

type name struct {
	Name string `json:"name"`
	Dir  bool   `json:"dir"`
}

type rule struct {
	Dir   string `json:"dir"`
	Skip  int    `json:"skip"`
	Names []name `json:"names"`
	seen  int
	done  bool
}

// proxy is the state shared by the two directions.
type proxy struct {
	mu      sync.Mutex
	rules   []*rule
	opendir map[uint32]string // request id -> path
	handles map[string]*rule  // handle -> rule to apply at its first READDIR
	readdir map[uint32]*rule  // request id -> rule to apply to its NAME
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sftpproxy:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) < 2 {
		return fmt.Errorf("usage: sftpproxy CONFIG.json [SFTP-SERVER]")
	}
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		return err
	}
	p := &proxy{opendir: map[uint32]string{}, handles: map[string]*rule{}, readdir: map[uint32]*rule{}}
	if err := json.Unmarshal(b, &p.rules); err != nil {
		return fmt.Errorf("%s: %w", os.Args[1], err)
	}
	server := "/usr/lib/openssh/sftp-server"
	if len(os.Args) > 2 {
		server = os.Args[2]
	}
	cmd := exec.Command(server)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		_ = p.forward(os.Stdin, in, p.request)
		in.Close()
	}()
	_ = p.forward(out, os.Stdout, p.reply)
	return cmd.Wait()
}

// forward copies packets from r to w, passing each through edit.
func (p *proxy) forward(r io.Reader, w io.Writer, edit func([]byte) []byte) error {
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		pkt := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(r, pkt); err != nil {
			return err
		}
		pkt = edit(pkt)
		binary.BigEndian.PutUint32(hdr[:], uint32(len(pkt)))
		if _, err := w.Write(append(hdr[:], pkt...)); err != nil {
			return err
		}
	}
}

// str reads an SFTP string at b[off:]; ok is false past the end.
func str(b []byte, off int) (string, int, bool) {
	if off+4 > len(b) {
		return "", 0, false
	}
	n := int(binary.BigEndian.Uint32(b[off:]))
	if off+4+n > len(b) {
		return "", 0, false
	}
	return string(b[off+4 : off+4+n]), off + 4 + n, true
}

// request notes OPENDIRs of ruled directories and READDIRs of their
// handles.
func (p *proxy) request(pkt []byte) []byte {
	if len(pkt) < 5 {
		return pkt
	}
	id := binary.BigEndian.Uint32(pkt[1:])
	p.mu.Lock()
	defer p.mu.Unlock()
	switch pkt[0] {
	case fxpOpendir:
		if s, _, ok := str(pkt, 5); ok {
			p.opendir[id] = path.Clean(s)
		}
	case fxpReaddir:
		if h, _, ok := str(pkt, 5); ok {
			if r := p.handles[h]; r != nil {
				delete(p.handles, h)
				p.readdir[id] = r
			}
		}
	}
	return pkt
}

// reply maps handles to rules and adds the crafted names to a listing.
func (p *proxy) reply(pkt []byte) []byte {
	if len(pkt) < 5 {
		return pkt
	}
	id := binary.BigEndian.Uint32(pkt[1:])
	p.mu.Lock()
	defer p.mu.Unlock()
	switch pkt[0] {
	case fxpHandle:
		dir, ok := p.opendir[id]
		delete(p.opendir, id)
		h, _, hok := str(pkt, 5)
		if !ok || !hok {
			return pkt
		}
		for _, r := range p.rules {
			if r.Dir == dir && !r.done {
				r.seen++
				if r.seen > r.Skip {
					r.done = true
					p.handles[h] = r
				}
				break
			}
		}
	case fxpName:
		r := p.readdir[id]
		delete(p.readdir, id)
		if r == nil || len(pkt) < 9 {
			return pkt
		}
		count := binary.BigEndian.Uint32(pkt[5:])
		binary.BigEndian.PutUint32(pkt[5:], count+uint32(len(r.Names)))
		for _, n := range r.Names {
			pkt = appendEntry(pkt, n)
		}
	}
	return pkt
}

// appendEntry appends one NAME entry: filename, longname, attrs with only
// the permissions (a directory or a regular file, 0755).
func appendEntry(pkt []byte, n name) []byte {
	mode := uint32(0o100755)
	if n.Dir {
		mode = 0o040755
	}
	for _, s := range []string{n.Name, n.Name} {
		pkt = binary.BigEndian.AppendUint32(pkt, uint32(len(s)))
		pkt = append(pkt, s...)
	}
	pkt = binary.BigEndian.AppendUint32(pkt, attrPerms)
	return binary.BigEndian.AppendUint32(pkt, mode)
}
