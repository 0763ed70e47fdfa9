package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// twoStageInterrupt is how `drover run` and `drover exec` treat Ctrl-C: the
// first SIGINT, SIGTERM or SIGHUP cancels ctx (a graceful stop of what runs
// on the hosts) and says so on w with what; the second closes hard (kill at
// once, without waiting out the grace). stop releases the signals.
//
// SIGHUP is there because a closed terminal or a dropped ssh session to the
// machine drover runs on would otherwise kill drover outright, leaving
// `drover exec`'s commands running on the hosts. Under nohup it stays
// ignored: Notify would undo that.
func twoStageInterrupt(parent context.Context, w io.Writer, what string) (ctx context.Context, hard <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	hardc := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, interruptSignals()...)
	quit := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case s := <-sigs:
				n++
				if n == 1 {
					fmt.Fprintf(w, "drover: %v: %s (again to kill at once)\n", s, what)
					cancel(fmt.Errorf("%v", s))
				} else {
					close(hardc)
					return
				}
			case <-quit:
				return
			}
		}
	}()
	return ctx, hardc, func() {
		signal.Stop(sigs)
		close(quit)
		cancel(nil)
	}
}

// interruptSignals are the signals that stop drover gracefully: SIGINT and
// SIGTERM, and SIGHUP unless drover was started with it ignored (nohup).
func interruptSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}
