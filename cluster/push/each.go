package push

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
)

// countdown returns a function that calls f on its n-th call, from any
// goroutine: "every upload's content is there" when uploads end in any
// order.
func countdown(n int, f func()) func() {
	var left atomic.Int64
	left.Store(int64(n))
	return func() {
		if left.Add(-1) == 0 {
			f()
		}
	}
}

// parallel runs fns at once and joins their errors.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// byDepth groups dirs by their depth in the tree, the top level first.
func byDepth(dirs []Dir) [][]Dir {
	var levels [][]Dir
	for _, d := range dirs {
		n := strings.Count(d.Path, "/")
		for len(levels) <= n {
			levels = append(levels, nil)
		}
		levels[n] = append(levels[n], d)
	}
	return levels
}

// forEach runs fn for 0..n-1 on up to workers goroutines and returns the
// first error, cancelling the others' context when one fails.
func forEach(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	if n == 0 {
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers = max(1, min(workers, n))
	next := make(chan int)
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// fileErr describes a failed operation on a pushed file by its path in the
// tree ("upload train.py: permission denied") rather than by the temporary
// or absolute name the FS saw, while still wrapping the FS's error so that
// errors.Is(err, fs.ErrPermission) and the like hold.
func fileErr(op, rel string, err error) error {
	return &opError{op: op, rel: rel, err: err}
}

type opError struct {
	op, rel string
	err     error
}

func (e *opError) Error() string {
	msg := e.err.Error()
	var pe *fs.PathError
	if errors.As(e.err, &pe) && e.err == error(pe) {
		msg = pe.Err.Error()
	}
	return e.op + " " + e.rel + ": " + msg
}

func (e *opError) Unwrap() error { return e.err }
