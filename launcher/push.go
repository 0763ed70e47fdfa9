package launcher

import (
	"context"
	"fmt"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
)

// PushOptions configures Push, the fan-out of `drover push`.
type PushOptions struct {
	// Dial is how the hosts are reached.
	Dial cluster.DialOptions
	// CacheDir is push.Options.CacheDir (the digest cache).
	CacheDir string
	// LogRoot is where runs keep their logs ("" = runs/ next to the job
	// file), which a push never sends, overwrites or deletes.
	LogRoot string
	// Verify is how much of what each host holds is checked.
	Verify push.Verify
	// Progress, when set, follows each host's push (push.Options.Progress).
	Progress func(push.Progress)
}

// PushOutcome is one host's push.
type PushOutcome struct {
	Result push.Result
	Err    error
	// Skipped says why nothing was pushed to the host: inside a Slurm
	// allocation, its workdir is another host's on the shared filesystem,
	// or the code directory itself (see workdirClaims).
	Skipped string
}

// PushResult is the whole fan-out: one outcome per host, in the order the
// hosts were given, and the scan's warnings (skipped links, say), with
// one for each file that kept changing while pushed, whichever hosts met
// it (push.Changing).
type PushResult struct {
	Hosts    []PushOutcome
	Warnings []string
}

// pushOptions is the one rule every push of a job goes by, `drover push`
// and each attempt of `drover run` alike: the job's excludes, and its
// checkpoints and logs inside the code directory never pushed, overwritten
// or deleted (push.ForJob), nor drover's own stdout and stderr redirected
// into it (push.StdOutputs).
func pushOptions(cfg *config.Config, logRoot, cacheDir string, verify push.Verify) push.Options {
	opts := push.ForJob(pushJob(cfg), logRoot)
	opts.Outputs = push.StdOutputs()
	opts.CacheDir = cacheDir
	opts.Verify = verify
	return opts
}

// Push syncs the job's code directory to every host's workdir at once. The
// scan runs while the hosts are dialled (it is most of a push's local work,
// and the handshakes are waiting on the hosts anyway). A scan error (a bad
// .droverignore, an escaping symlink) stops the dials and is returned
// alone, before anything is read or written on any host; a host's failure
// is its outcome's Err, after the others finished.
func Push(ctx context.Context, cfg *config.Config, hosts []config.Host, o PushOptions) (*PushResult, error) {
	opts := pushOptions(cfg, o.LogRoot, o.CacheDir, o.Verify)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var tree *push.Tree
	var scanErr error
	scanned := make(chan struct{})
	scanOpts := opts // the scan's own copy: opts gets Progress below
	go func() {
		defer close(scanned)
		if tree, scanErr = scanLocal(cfg.Job.Code, scanOpts); scanErr != nil {
			cancel()
		}
	}()
	opts.Progress = o.Progress
	res := &PushResult{Hosts: make([]PushOutcome, len(hosts))}
	claims := newWorkdirClaims(cfg.Job.Code)
	cluster.DialEach(ctx, config.Endpoints(hosts), o.Dial, func(i int, t cluster.Transport, err error) {
		h := hosts[i]
		var fsys cluster.FS
		if t != nil {
			defer t.Close()
			// File access opens while the scan finishes (it reads
			// nothing and writes nothing; a failed scan cancels ctx).
			if fsys, err = t.FS(ctx); err != nil {
				err = fmt.Errorf("push to %s: open file access: %w", hostLabel(h), err)
			}
		}
		<-scanned
		switch {
		case scanErr != nil:
			return
		case err != nil:
			res.Hosts[i].Err = err // names the host and address already
			return
		}
		if h.Transport == config.TransportSlurm {
			// Only a slurm host may share a workdir: others need not
			// ask their FS for the home (a round trip over SSH).
			if res.Hosts[i].Skipped = claims.skip(h, t, fsHome(fsys)); res.Hosts[i].Skipped != "" {
				return
			}
		}
		res.Hosts[i].Result, res.Hosts[i].Err = push.SyncSteady(ctx, fsys, hostLabel(h), tree, h.Workdir, opts)
	})
	<-scanned
	if scanErr != nil {
		return nil, scanErr
	}
	res.Warnings = append(append([]string(nil), tree.Warnings...), changingWarnings(tree, res.Hosts)...)
	return res, nil
}

// changingWarnings are the warnings of the files that kept changing while
// pushed, one per file whatever the hosts that met it.
func changingWarnings(tree *push.Tree, hosts []PushOutcome) []string {
	var out []string
	seen := map[string]bool{}
	add := func(cs []push.Changing) {
		for _, c := range cs {
			if !seen[c.Path] {
				seen[c.Path] = true
				out = append(out, c.Warning())
			}
		}
	}
	add(tree.Changing)
	for _, h := range hosts {
		add(h.Result.Changing)
	}
	return out
}

// fsHome is the home directory fsys resolves relative paths against, ""
// when it cannot say (a slurm host's is always known).
func fsHome(fsys cluster.FS) string {
	home, _ := fsys.Home()
	return home
}
