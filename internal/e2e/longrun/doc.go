// Package longrun holds the end-to-end fleet scenarios of long runs
// (docs/long-runs.md): `drover run -d` and the background supervisor,
// status, logs and stop from another directory, adoption of a group
// whose supervisor is gone (by a detached or a foreground drover), a
// foreground run seen from another terminal, the run records kept on
// the hosts, and `drover top` of a detached run. The shared helpers are
// internal/e2e/kit's; the package has its own fleet and no code outside
// tests.
package longrun
