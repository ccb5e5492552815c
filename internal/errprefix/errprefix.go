// Package errprefix keeps the "batchlock: " that starts the message of
// every error the library makes to once per message, where errors of the
// library wrap each other: the outer error says it, and each error of the
// library written after the start of its message is wrapped with Inner.
package errprefix

import "strings"

// Prefix starts the message of every error the library makes.
const Prefix = "batchlock: "

// Inner returns err for writing inside the message of another error of the
// library, after its start: its message without its own leading Prefix.
// It unwraps to err, so that errors.Is and errors.As see through it. An
// error that does not start with Prefix (a caller's, go-redis's, a
// context's) is written as it is.
func Inner(err error) error {
	if err == nil {
		return nil
	}
	return inner{err}
}

type inner struct{ err error }

func (e inner) Error() string { return strings.TrimPrefix(e.err.Error(), Prefix) }
func (e inner) Unwrap() error { return e.err }
