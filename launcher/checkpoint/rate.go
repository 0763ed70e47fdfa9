package checkpoint

import (
	"context"
	"io"
	"time"
)

// clock is the time a limiter reads and waits on; tests give a fake one.
type clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rateSlack is how far behind its rate a limiter may fall and still catch
// up: a copy that was slower than the cap for a while (a busy host) does
// not then burst above it for longer than this.
const rateSlack = time.Second

// limiter holds a copy to checkpoint_copy_rate: after n bytes it waits
// until n/rate seconds have passed since it was made. A nil limiter never
// waits.
type limiter struct {
	rate  float64 // bytes per second
	clock clock
	start time.Time
	bytes int64
}

// newLimiter is a limiter for rate bytes per second; nil for no cap.
func newLimiter(rate int64, c clock) *limiter {
	if rate <= 0 {
		return nil
	}
	return &limiter{rate: float64(rate), clock: c, start: c.Now()}
}

// took accounts n more bytes and waits until the rate allows them.
func (l *limiter) took(ctx context.Context, n int) error {
	if l == nil || n <= 0 {
		return nil
	}
	now := l.clock.Now()
	due := l.start.Add(time.Duration(float64(l.bytes) / l.rate * float64(time.Second)))
	if behind := now.Sub(due); behind > rateSlack {
		// Slower than the rate for a while: forget the credit beyond
		// rateSlack rather than send it all at once.
		l.start = l.start.Add(behind - rateSlack)
	}
	l.bytes += int64(n)
	due = l.start.Add(time.Duration(float64(l.bytes) / l.rate * float64(time.Second)))
	if d := due.Sub(now); d > 0 {
		return l.clock.Sleep(ctx, d)
	}
	return nil
}

// limitedReader waits on its limiter after every read.
type limitedReader struct {
	ctx context.Context
	r   io.Reader
	l   *limiter
}

func (r limitedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if werr := r.l.took(r.ctx, n); werr != nil && err == nil {
		err = werr
	}
	return n, err
}
