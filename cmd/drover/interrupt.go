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
// first SIGINT or SIGTERM cancels ctx (a graceful stop of what runs on the
// hosts) and says so on w with what; the second closes hard (kill at once,
// without waiting out the grace). stop releases the signals.
func twoStageInterrupt(parent context.Context, w io.Writer, what string) (ctx context.Context, hard <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	hardc := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
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
