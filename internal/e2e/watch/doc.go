// Package watch holds the end-to-end fleet scenarios of what drover
// watches while a run trains (docs/health.md, docs/triage.md,
// docs/notifications.md): the GPU health gate and Xid watch, live stacks
// and the hang verdict (with NCCL RAS), stragglers named and replaced,
// `drover top`, notifications, and a group that shrinks on a lost host
// and grows back (min_hosts). The shared helpers are internal/e2e/kit's;
// the package has its own fleet and no code outside tests.
package watch
