package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary job and inventory files to the loader. Whatever
// the input, Load must not panic or hang, must fail only with
// configuration errors that say where and what, and what it accepts must
// satisfy the invariants the rest of drover relies on.
//
//	go test -run='^$' -fuzz=FuzzLoad -fuzztime=60s ./cluster/
func FuzzLoad(f *testing.F) {
	var seeds []string
	_ = filepath.WalkDir(filepath.Join("testdata", "config"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".toml") {
			if b, rerr := os.ReadFile(p); rerr == nil {
				seeds = append(seeds, string(b))
			}
		}
		return nil
	})
	inventory, _ := os.ReadFile(filepath.Join("testdata", "config", "inventory", "fleet.toml"))
	for _, s := range seeds {
		f.Add([]byte(s), inventory)
	}
	for _, tc := range errorCases {
		inv := inventory
		for _, src := range tc.files {
			inv = []byte(src)
		}
		f.Add([]byte(tc.job), inv)
	}

	dir := f.TempDir()
	jobPath := filepath.Join(dir, "job.toml")
	f.Fuzz(func(t *testing.T, job, inv []byte) {
		read := func(p string) ([]byte, error) {
			if p == jobPath {
				return job, nil
			}
			return inv, nil
		}
		for _, opts := range []LoadOptions{{}, {InventoryPath: filepath.Join(dir, "inv.toml")}} {
			cfg, err := load(jobPath, opts, read)
			if err != nil {
				if cfg != nil {
					t.Fatalf("config %+v returned with error %v", cfg, err)
				}
				checkFuzzErrors(t, err)
				continue
			}
			checkFuzzConfig(t, cfg)
		}
	})
}

func checkFuzzErrors(t *testing.T, err error) {
	t.Helper()
	if !IsConfigError(err) {
		t.Fatalf("not a config error: %T %v", err, err)
	}
	ces, ok := err.(ConfigErrors)
	if !ok || len(ces) == 0 {
		t.Fatalf("want non-empty ConfigErrors, got %T %v", err, err)
	}
	for _, e := range ces {
		if e == nil || e.File == "" || e.Msg == "" || e.Line < 0 {
			t.Fatalf("incomplete error %#v", e)
		}
	}
}

func checkFuzzConfig(t *testing.T, cfg *Config) {
	t.Helper()
	j := cfg.Job
	switch {
	case !nameRE.MatchString(j.Name):
		t.Fatalf("accepted job name %q", j.Name)
	case j.Framework != PyTorch && j.Framework != Torchrun && j.Framework != TensorFlow:
		t.Fatalf("accepted framework %q", j.Framework)
	case len(j.Command) == 0 || j.Command[0] == "":
		t.Fatalf("accepted command %q", j.Command)
	case !filepath.IsAbs(j.Code):
		t.Fatalf("code %q is not absolute", j.Code)
	case j.Workdir == "" || j.CheckpointDir == "":
		t.Fatalf("empty workdir %q or checkpoint_dir %q", j.Workdir, j.CheckpointDir)
	case j.MasterPort < 1 || j.MasterPort > 65535 || j.BasePort < 1 || j.BasePort > 65535:
		t.Fatalf("ports %d %d", j.MasterPort, j.BasePort)
	case j.ProcsPerHost < 1 || j.MaxRestarts < 0 || j.GPUMaxUsedMiB < 0 || j.MinGPUs < 0:
		t.Fatalf("counts %+v", j)
	case j.RestartBackoff < 0 || j.RestartBackoffMax < j.RestartBackoff || j.StopGrace < 0 || j.HostWait < 0:
		t.Fatalf("durations %+v", j)
	case j.Framework != TensorFlow && j.Roles != (Roles{}):
		t.Fatalf("roles %+v on %s", j.Roles, j.Framework)
	case j.Framework == TensorFlow && j.Roles.Chief == 0 && j.Roles.Worker == 0 && !j.Roles.WorkerAuto:
		t.Fatalf("tensorflow without chief or worker")
	case j.Roles.Chief > 1:
		t.Fatalf("chief %d", j.Roles.Chief)
	}
	for k := range j.Env {
		if !ValidEnvName(k) {
			t.Fatalf("accepted env name %q", k)
		}
	}
	if len(cfg.Hosts) == 0 {
		t.Fatal("accepted a fleet without hosts")
	}
	names := map[string]bool{}
	active := false
	for _, h := range cfg.Hosts {
		if !nameRE.MatchString(h.Name) || names[h.Name] {
			t.Fatalf("host name %q invalid or repeated", h.Name)
		}
		names[h.Name] = true
		active = active || !h.Spare
		switch {
		case h.Transport != TransportSSH && h.Transport != TransportLocal:
			t.Fatalf("transport %q", h.Transport)
		case h.Address == "":
			t.Fatalf("host %s without address", h.Name)
		case h.Port < 0 || h.Port > 65535:
			t.Fatalf("host %s port %d", h.Name, h.Port)
		case h.Line < 1:
			t.Fatalf("host %s has no line", h.Name)
		case h.GPUs.Auto && len(h.GPUs.List) > 0:
			t.Fatalf("host %s gpus both auto and %v", h.Name, h.GPUs.List)
		}
		for _, g := range h.GPUs.List {
			if g < 0 {
				t.Fatalf("host %s gpu %d", h.Name, g)
			}
		}
	}
	if !active {
		t.Fatal("accepted a fleet of spares only")
	}
}
