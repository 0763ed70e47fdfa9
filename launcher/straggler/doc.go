// Package straggler decides which rank of a running group is a straggler:
// from rounds of samples of every rank (its CPU time, its step, its GPU's
// SM clock and throttle reasons) it names the rank whose CPU time per
// step, step rate or GPU clock stands far from its peers' median, once it
// has done so for a few rounds running, and lets it go once it has not
// for as many (Detector, pure and table-tested); and it takes those
// rounds over the connections the run holds (Watch, the thin effects
// around it). For on_straggler = "replace" it decides when a named
// straggler's host is replaced: at the group's next checkpoint, when a
// spare is free (Decide, pure; Replacer, the loop that feeds it).
package straggler
