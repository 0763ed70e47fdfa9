package config

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// hostsReader reads the hosts of the file that holds them (the job file or
// an inventory): the [ssh] defaults, each [[host]] over them, its address,
// connection keys and GPUs, and the checks across hosts (names and
// addresses used twice, every host a spare).
type hostsReader struct{ *walker }

// sshSettings are the connection keys shared by [ssh] and [[host]].
type sshSettings struct {
	User, IdentityFile, KnownHosts, ProxyJump string
	Port                                      int
}

// ssh reads the connection keys of t over base.
func (w hostsReader) ssh(t tbl, dir string, base sshSettings) sshSettings {
	s := base
	if v, ok := w.str(t, "user"); ok {
		if strings.ContainsAny(v, " \t\n@:/\x00") {
			w.add(t.key("user"), fmt.Sprintf("user %s contains a space, '@', ':' or '/'", show(v)),
				`write the login name alone, e.g. user = "ubuntu", and the machine in address`)
		} else {
			s.User = v
		}
	}
	if n, ok := w.port(t, "port"); ok {
		s.Port = n
	}
	if p, ok := w.localPath(t, "identity_file", dir); ok {
		s.IdentityFile = p
	}
	if p, ok := w.localPath(t, "known_hosts", dir); ok {
		s.KnownHosts = p
	}
	if v, ok := w.str(t, "proxy_jump"); ok {
		if strings.ContainsAny(v, " \t\n\x00") {
			w.add(t.key("proxy_jump"), fmt.Sprintf("proxy_jump %s contains a space", show(v)),
				`write one jump host, e.g. proxy_jump = "bastion" or "user@10.0.0.1:22" (several: "a,b")`)
		} else {
			s.ProxyJump = v
		}
	}
	return s
}

// hosts reads [ssh] and the [[host]] tables of the file holding the fleet.
func (w hostsReader) hosts(top tbl, dir string, fw Framework) []Host {
	var defaults sshSettings
	if st, ok := w.table(top, "ssh", sshSchema); ok {
		w.unknown(st)
		defaults = w.ssh(st, dir, defaults)
	}

	var tables []map[string]any
	switch v := top.m["host"].(type) {
	case nil:
		w.missing(top, "host", "no hosts",
			`add a [[host]] table for each machine, with name = "gpu-a" and address = "10.0.0.11" (or address = "local")`)
		return nil
	case []map[string]any:
		tables = v
	case []any:
		for i, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				w.add(indexPath("host", i+1), fmt.Sprintf("must be a table, not %s", tomlType(e)),
					`write each host as a [[host]] table with name and address`)
				continue
			}
			tables = append(tables, m)
		}
	case map[string]any:
		w.add("host", "[host] is a single table; hosts are an array of tables",
			"write [[host]] (double brackets) above each host")
		return nil
	default:
		w.add("host", fmt.Sprintf("must be [[host]] tables, not %s", tomlType(v)),
			`write a [[host]] table for each machine, with name and address`)
		return nil
	}

	var hosts []Host
	type seen struct {
		line int
		name string
	}
	names := map[string]seen{}
	addrs := map[string]seen{}
	for i, m := range tables {
		t := tbl{m: m, path: indexPath("host", i+1), schema: hostSchema}
		w.unknown(t)
		h, ok := w.host(t, dir, defaults, fw)
		if !ok {
			continue
		}
		if h.Name != "" {
			if s, dup := names[h.Name]; dup {
				w.add(t.key("name"), fmt.Sprintf("host name %q is used twice (first at line %d)", h.Name, s.line),
					fmt.Sprintf("give each host its own name, e.g. name = %q", h.Name+"-2"))
			} else {
				names[h.Name] = seen{h.Line, h.Name}
			}
		}
		if h.Transport == TransportSSH && h.Address != "" {
			k := strings.ToLower(h.Address) + "|" + strconv.Itoa(h.Port)
			if s, dup := addrs[k]; dup {
				w.add(t.key("address"), fmt.Sprintf("host %q has the same address and port as host %q (line %d)", h.Name, s.name, s.line),
					"list each machine once; use a different address or port, or remove the duplicate [[host]]")
			} else {
				addrs[k] = seen{h.Line, h.Name}
			}
		}
		hosts = append(hosts, h)
	}
	active := 0
	for _, h := range hosts {
		if !h.Spare {
			active++
		}
	}
	if len(hosts) > 0 && active == 0 {
		w.add("host", "every host is a spare; at least one must take part in the first plan",
			"remove spare = true from at least one [[host]]")
	}
	return hosts
}

// host reads one [[host]] table over the [ssh] defaults. ok is false when
// the table is too broken to use for duplicate checks.
func (w hostsReader) host(t tbl, dir string, defaults sshSettings, fw Framework) (Host, bool) {
	h := Host{Line: w.lines[t.path], GPUs: GPUSpec{Auto: true}, Transport: TransportSSH}
	name, nameOK := w.name(t, "name", "host")
	if _, present := t.m["name"]; !present {
		w.missing(t, "name", "missing host name",
			fmt.Sprintf(`add name = "gpu-a" to this [[host]] (%s); it labels the host's logs`, t.path))
	}
	if nameOK {
		h.Name = name
	}
	transport, tOK := w.enum(t, "transport", TransportSSH, TransportLocal)
	if tOK {
		h.Transport = transport
	}
	addr, addrOK := w.str(t, "address")
	switch {
	case addrOK && addr == TransportLocal:
		if tOK && transport == TransportSSH {
			w.add(t.key("transport"), `transport = "ssh" with address = "local"`,
				`write transport = "local" (or give the machine's address to reach it over SSH)`)
		}
		h.Transport = TransportLocal
		h.Address = addr
	case addrOK:
		if msg, fix := checkAddress(addr); msg != "" {
			w.add(t.key("address"), msg, fix)
		} else {
			h.Address = addr
		}
	case h.Transport == TransportLocal:
		if _, present := t.m["address"]; !present {
			h.Address = TransportLocal
		}
	default:
		if _, present := t.m["address"]; !present {
			label := t.path
			if h.Name != "" {
				label = fmt.Sprintf("host %q", h.Name)
			}
			w.missing(t, "address", "missing address of "+label,
				`add address = "10.0.0.11" (an IP or DNS name), or address = "local" for this machine`)
		}
	}
	s := w.ssh(t, dir, defaults)
	h.User, h.Port, h.IdentityFile, h.KnownHosts, h.ProxyJump = s.User, s.Port, s.IdentityFile, s.KnownHosts, s.ProxyJump
	if h.ProxyJump != "" && h.ProxyJump == h.Name {
		w.add(t.key("proxy_jump"), "a host cannot jump through itself",
			"name another host (a bastion) in proxy_jump, or remove it")
	}
	if g, ok := w.gpus(t); ok {
		h.GPUs = g
	}
	if n, ok := w.integer(t, "min_gpus", 0, 1024, "between 0 and 1024"); ok {
		h.MinGPUs = n
	}
	if b, ok := w.boolean(t, "spare"); ok {
		h.Spare = b
	}
	if p, ok := w.remotePath(t, "workdir"); ok {
		h.Workdir = p
	}
	if env := w.env(t, "[host.env]", fw); len(env) > 0 {
		h.Env = env
	}
	return h, true
}

// checkAddress returns what is wrong with an address and the fix, or "".
func checkAddress(a string) (msg, fix string) {
	switch {
	case a == "":
		return "address is empty", `write address = "10.0.0.11" (an IP or DNS name), or address = "local"`
	case strings.Contains(a, "@"):
		u, hst, _ := strings.Cut(a, "@")
		return fmt.Sprintf("address %s includes a user", show(a)),
			fmt.Sprintf("write user = %q and address = %q", u, hst)
	}
	if hst, p, err := net.SplitHostPort(a); err == nil {
		return fmt.Sprintf("address %s includes a port", show(a)),
			fmt.Sprintf("write address = %q and port = %s", hst, p)
	}
	if net.ParseIP(strings.SplitN(a, "%", 2)[0]) != nil {
		return "", ""
	}
	if !hostnameRE.MatchString(a) {
		return fmt.Sprintf("address %s is not an IP address or DNS name", show(a)),
			`write an IP or DNS name, e.g. address = "10.0.0.11" or "gpu-a.example.com"`
	}
	return "", ""
}

// hostnameRE accepts DNS names and ~/.ssh/config aliases.
var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`)

// gpus reads a host's gpus: "auto", or a list of GPU indices.
func (w hostsReader) gpus(t tbl) (GPUSpec, bool) {
	key := t.key("gpus")
	const fix = `write gpus = "auto" to use every free GPU, gpus = [0, 1] to pin GPUs by index, or gpus = [] for none`
	v, present := t.m["gpus"]
	if !present {
		return GPUSpec{Auto: true}, false
	}
	switch x := v.(type) {
	case string:
		if x == "auto" {
			return GPUSpec{Auto: true}, true
		}
		w.add(key, fmt.Sprintf("gpus = %q is not understood", x), fix)
	case int64:
		f := fix
		if x > 0 && x <= 16 {
			idx := make([]string, x)
			for i := range idx {
				idx[i] = strconv.Itoa(i)
			}
			f = fmt.Sprintf(`gpus lists GPU indices, not a count: write gpus = [%s] to use GPUs 0 to %d, or gpus = "auto" with min_gpus = %d`,
				strings.Join(idx, ", "), x-1, x)
		}
		w.add(key, fmt.Sprintf("gpus = %d is a number, not a list of GPU indices", x), f)
	case []any:
		spec := GPUSpec{List: []int{}}
		ok := true
		dup := map[int64]bool{}
		for i, e := range x {
			n, isInt := e.(int64)
			switch {
			case !isInt:
				w.add(key, fmt.Sprintf("element %d must be a GPU index (integer), not %s (%s)", i+1, tomlType(e), show(e)), fix)
				ok = false
			case n < 0 || n > 1023:
				w.add(key, fmt.Sprintf("GPU index %d is out of range", n), "GPU indices start at 0 (nvidia-smi numbering); "+fix)
				ok = false
			case dup[n]:
				w.add(key, fmt.Sprintf("GPU %d is listed twice", n), "list each GPU index once")
				ok = false
			default:
				dup[n] = true
				spec.List = append(spec.List, int(n))
			}
		}
		if ok {
			return spec, true
		}
	default:
		w.add(key, fmt.Sprintf("must be \"auto\" or a list of GPU indices, not %s", tomlType(v)), fix)
	}
	return GPUSpec{Auto: true}, false
}
