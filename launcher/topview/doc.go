// Package topview shows what `drover top` watches (top.View): as
// text rows for a terminal (a tcell screen, or plain lines for --once),
// and as Prometheus metrics labelled by job, host, rank and GPU.
// Everything a host sent is escaped before it is shown: a host cannot
// put a control character on the user's terminal.
package topview
