package topview

import (
	"context"
	"fmt"
	"time"

	"github.com/gdamore/tcell/v2"

	"github.com/droverhq/drover/launcher/top"
)

// Interactive draws the view on the terminal every interval until the
// user presses q (or Esc, or Ctrl-C) or ctx ends. tcell owns the
// terminal (its modes, sizes and escape codes); the rows it draws are
// escaped already.
func Interactive(ctx context.Context, view func() top.View, every time.Duration) error {
	s, err := tcell.NewScreen()
	if err != nil {
		return fmt.Errorf("drover top: open the terminal: %w", err)
	}
	if err := s.Init(); err != nil {
		return fmt.Errorf("drover top: set the terminal up: %w", err)
	}
	defer s.Fini()
	return run(ctx, s, view, every)
}

// run is Interactive on screen s.
func run(ctx context.Context, s tcell.Screen, view func() top.View, every time.Duration) error {
	quit := make(chan struct{})
	go func() {
		defer close(quit)
		for {
			switch ev := s.PollEvent().(type) {
			case nil:
				return // screen finished
			case *tcell.EventKey:
				if ev.Key() == tcell.KeyEscape || ev.Key() == tcell.KeyCtrlC || ev.Rune() == 'q' || ev.Rune() == 'Q' {
					return
				}
			case *tcell.EventResize:
				s.Sync()
			}
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		draw(s, Rows(view()))
		select {
		case <-ctx.Done():
			return nil
		case <-quit:
			return nil
		case <-tick.C:
		}
	}
}

// draw puts lines on the screen from the top left, cut at its width.
func draw(s tcell.Screen, lines []string) {
	s.Clear()
	w, h := s.Size()
	style := tcell.StyleDefault
	for y, line := range lines {
		if y >= h {
			break
		}
		x := 0
		for _, r := range line {
			if x >= w {
				break
			}
			s.SetContent(x, y, r, nil, style)
			x++
		}
	}
	last := "q quits"
	for i, r := range last {
		if i < w && h > 0 {
			s.SetContent(i, h-1, r, nil, style.Reverse(true))
		}
	}
	s.Show()
}
