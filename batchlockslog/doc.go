// Package batchlockslog logs batchlock's lock events with log/slog. batchlock
// never logs by itself; install this with batchlock.WithObserver:
//
//	locks, err := batchlock.New(rdb, batchlock.WithObserver(batchlockslog.Observer(logger)))
//
// Levels: a lost lock is an error, a failed acquisition a warning, the rest
// (acquired, conflict, renewed, released) debug. Keys are logged by count
// only, with the first few as a sample, so that a 500-key batch makes one
// short line.
package batchlockslog
