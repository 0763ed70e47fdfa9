// Package top is `drover top`'s data: one `drover agent top` stream per
// host, redialled when it falls silent, folded into a View of the
// fleet's GPUs and processes. Package topview draws it (a terminal screen,
// Prometheus metrics) and imports this package only, so that the agent's
// build, which links neither, stays small.
package top
