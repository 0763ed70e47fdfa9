// Package sharing holds the end-to-end fleet scenarios of a fleet shared
// by people and by sweeps, and of hosts made ready to train
// (docs/sharing.md, docs/sweeps.md, docs/environments.md): per-GPU leases
// between runs and users, the queue, `drover sweep` (grid, early
// stopping, trials of several hosts, lease waits, lost hosts, detached
// sweeps and their resume), the setup step and containers. The shared
// helpers are internal/e2e/kit's; the package has its own fleet and no
// code outside tests.
package sharing
