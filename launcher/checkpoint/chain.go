package checkpoint

import (
	"context"
	"path"
)

// Chain is the direct copy's chain for other packages (launcher/stage,
// which stages data sets with it): the file or directory srcPath on src
// goes, as entry name, to every host of dests as one chain (src ->
// dests[0] -> dests[1] ...), each writing <Own>/<seq>/<name> with its
// MANIFEST, through the same authenticated, verified stream as
// checkpoints, read at most rate bytes per second when positive. It
// returns the hosts that hold a verified copy (by name) and, for the
// others, why; nothing goes through the controller.
func Chain(ctx context.Context, src Host, srcPath string, seq int, name string, dests []Host, rate int64, events func(string, ...any)) (done []string, err error) {
	j := directJob{src: src, srcPath: srcPath, seq: seq, name: name, rate: rate}
	ok, _, _, why := directCopy(ctx, j, dests, events)
	for _, d := range ok {
		done = append(done, d.host.Name)
	}
	return done, why
}

// ChainDir is where Chain puts seq's entry name under a host's own.
func ChainDir(own string, seq int, name string) string {
	return path.Join(own, seqDir(seq), name)
}
