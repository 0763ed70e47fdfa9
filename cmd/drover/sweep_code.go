//go:build !droveragent

package main

import (
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/fanout"
	"github.com/droverhq/drover/launcher/sweep"
	"github.com/droverhq/drover/launcher/sweeprun"
)

// sweepCode pushes the job's code once per host of a sweep, into
// <workdir>/trials/code, the first time a trial is placed there, and
// seeds each trial's directory on the host from it with hard links
// (sweeprun.SeedCommand): the trial's own run still pushes, as every run
// does, and finds nothing to send. A host whose push failed is pushed
// again by its next trial.
type sweepCode struct {
	c   *cli.Context
	cfg *config.Config
	say io.Writer
	mu  sync.Mutex
	// hosts holds one lock per host, held while its push runs; pushed
	// says which hosts have the code.
	hosts  map[string]*sync.Mutex
	pushed map[string]bool
}

func newSweepCode(c *cli.Context, cfg *config.Config, say io.Writer) *sweepCode {
	return &sweepCode{c: c, cfg: cfg, say: say, hosts: map[string]*sync.Mutex{}, pushed: map[string]bool{}}
}

// ready puts the code in trial's directory on each host of p: the
// host's push first, once; a push that fails is the trial's error (a
// lost host's error says so, for the sweep to move the trial). A seed
// that fails (no hard links there) only means the trial's push sends
// the code.
func (s *sweepCode) ready(ctx context.Context, p sweep.Placement, trial string) error {
	for _, ph := range p.Hosts {
		i := slices.IndexFunc(s.cfg.Hosts, func(h config.Host) bool { return h.Name == ph.Host })
		if i < 0 {
			continue // TrialConfig says it, with the fix
		}
		h := s.cfg.Hosts[i]
		if err := s.push(ctx, h); err != nil {
			return err
		}
		cmd := sweeprun.SeedCommand(path.Join(h.Workdir, sweeprun.CodeDir()), path.Join(h.Workdir, sweeprun.TrialDir(trial)))
		res := fanout.Exec(ctx, []config.Host{h}, fanout.ExecOptions{Args: []string{cmd}, Dial: dialOptions(s.c, s.cfg.Hosts)})
		if res[0].Err != nil {
			fmt.Fprintf(s.say, "drover: sweep: %s: trial %s's directory not seeded from the shared code (%v): its run pushes the code\n", h.Name, trial, res[0].Err)
		}
	}
	return nil
}

// push pushes the code to h's <workdir>/trials/code unless done.
func (s *sweepCode) push(ctx context.Context, h config.Host) error {
	s.mu.Lock()
	lock := s.hosts[h.Name]
	if lock == nil {
		lock = &sync.Mutex{}
		s.hosts[h.Name] = lock
	}
	s.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	s.mu.Lock()
	done := s.pushed[h.Name]
	s.mu.Unlock()
	if done {
		return nil
	}
	h.Workdir = path.Join(h.Workdir, sweeprun.CodeDir())
	res, err := launcher.Push(ctx, s.cfg, []config.Host{h}, launcher.PushOptions{Dial: dialOptions(s.c, s.cfg.Hosts),
		CacheDir: cacheDir(), LogRoot: s.c.String("log-dir"), Verify: push.VerifyStat})
	if err == nil {
		err = res.Hosts[0].Err
	}
	if err != nil {
		return fmt.Errorf("push the sweep's code to %s:%s: %w", h.Name, h.Workdir, err)
	}
	r := res.Hosts[0].Result
	fmt.Fprintf(s.say, "drover: sweep: code pushed to %s:%s (%d file(s) sent, %d bytes), shared by its trials\n", h.Name, h.Workdir, r.FilesSent, r.BytesSent)
	s.mu.Lock()
	s.pushed[h.Name] = true
	s.mu.Unlock()
	return nil
}
