// Package setup owns a job's setup step (setup, setup_key, setup_timeout
// in the job file; docs/environments.md): the shell lines each host runs in
// its workdir after the push and before any process starts, to build the
// environment the processes run in (a virtualenv, `uv sync`, a conda
// environment).
//
// Whether a host runs them is decided by Decide alone, a pure function of
// the stamp the host's last successful setup left (<workdir>/.drover/
// setup.json: the lines, a digest of each setup_key file, the machine
// architecture) and what the host would record now; the rest of the package
// gathers those values and runs the lines over connections the caller
// made (Run: `drover run` before its first attempt and on a spare that joins)
// or that it makes itself (RunJob: `drover setup`). Each host's output goes to the
// terminal as "[setup@HOST] ..." lines and whole into the run directory;
// a failure on any host is an *Error naming the host, its exit status and
// the last lines of its output, so that the caller starts nothing.
package setup
