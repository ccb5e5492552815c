package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress shows how many orders are done on stderr: a bar redrawn in
// place on a terminal, a line every few seconds otherwise (a log file, CI).
type progress struct {
	w     io.Writer
	tty   bool
	total int
	done  atomic.Int64

	mu   sync.Mutex // serialises writes, so log lines do not cut the bar
	stop chan struct{}
	wg   sync.WaitGroup
}

const (
	barWidth     = 30
	ttyRefresh   = 100 * time.Millisecond
	plainRefresh = 2 * time.Second
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startProgress starts drawing; stop ends it.
func startProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, tty: isTerminal(w), total: total, stop: make(chan struct{})}
	every := plainRefresh
	if p.tty {
		every = ttyRefresh
	}
	p.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw()
			}
		}
	})
	return p
}

// add counts one order done.
func (p *progress) add() int64 { return p.done.Add(1) }

// logf writes a line above the bar.
func (p *progress) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
	if p.tty {
		fmt.Fprint(p.w, p.line())
	}
}

// finish draws the final count and stops; the bar's line is ended.
func (p *progress) finish() {
	close(p.stop)
	p.wg.Wait()
	p.draw()
	if p.tty {
		p.mu.Lock()
		fmt.Fprintln(p.w)
		p.mu.Unlock()
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r"+p.line())
	} else {
		fmt.Fprintln(p.w, p.line())
	}
}

func (p *progress) line() string {
	done := int(p.done.Load())
	if !p.tty {
		return fmt.Sprintf("%d/%d orders", done, p.total)
	}
	filled := 0
	if p.total > 0 {
		filled = min(barWidth*done/p.total, barWidth)
	}
	return fmt.Sprintf("[%s%s] %d/%d orders", strings.Repeat("#", filled), strings.Repeat(" ", barWidth-filled), done, p.total)
}
