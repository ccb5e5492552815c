package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure, or a failed audit
	exitUsage   = 2
)

const usage = `batchlock locks many keys at once on Redis Cluster.

Usage:
  batchlock demo    [flags]          process SKU orders under batch locks and audit the stock
  batchlock inspect [flags]          list the locks held in a cluster
  batchlock unlock  --force [flags] KEY...
                                     release locks by hand (an operator's last resort)
  batchlock check   [flags]          preflight: does the cluster and client suit batchlock
  batchlock help [COMMAND]           show this, or a command's flags

Environment (a flag, when given, wins):
  BATCHLOCK_CLUSTER_ADDRS  cluster seeds, host:port[,host:port...], for --addrs
  BATCHLOCK_PREFIX         lock key prefix of inspect, unlock and check, for
                           --prefix (default batchlock:)

Without --addrs or $BATCHLOCK_CLUSTER_ADDRS, demo starts a throwaway
six-node cluster of its own and removes it afterwards; the other commands
need one of them.

Exit codes: 0 success, 1 failure (including a failed audit), 2 usage error
(reported in one line on stderr).
`

// command is one subcommand.
type command struct {
	name    string
	summary string
	flags   func(*flag.FlagSet) any // defines the flags, returns the values' holder
	run     func(ctx context.Context, env *env, opts any, args []string) error
}

// env is what a command writes to.
type env struct {
	stdout, stderr io.Writer
}

func commands() []command {
	return []command{demoCommand(), inspectCommand(), unlockCommand(), checkCommand()}
}

// usageError is a mistake in the command line: exit code 2. err, if any,
// is the error it reports.
type usageError struct {
	msg string
	err error
}

func (e *usageError) Error() string { return e.msg }

func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError carries an exit code other than 1 for a failure already
// reported (such as a failed audit, whose report says it all).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// usageLine reports a usage error on w in one line, "WHO: PROBLEM; see
// SEE", SEE being the command line that prints the full usage, and returns
// exitUsage.
func usageLine(w io.Writer, who, problem, see string) int {
	fmt.Fprintf(w, "%s: %s; see %s\n", who, oneLine(problem), see)
	return exitUsage
}

// oneLine joins the lines of msg (a joined error has several) with "; ".
func oneLine(msg string) string {
	return strings.Join(strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
}

// commandNames lists the commands, for a usage error that names them.
func commandNames() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		return usageLine(stderr, "batchlock", "no command given (one of "+commandNames()+")", "batchlock help")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			if c, ok := findCommand(rest[0]); ok {
				fmt.Fprint(stdout, commandUsage(c))
				return exitOK
			}
			return usageLine(stderr, "batchlock", fmt.Sprintf("unknown command %q (want one of %s)", rest[0], commandNames()), "batchlock help")
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	c, ok := findCommand(name)
	if !ok {
		return usageLine(stderr, "batchlock", fmt.Sprintf("unknown command %q (want one of %s)", name, commandNames()), "batchlock help")
	}

	fs := newFlagSet(c.name)
	opts := c.flags(fs)
	positional, err := parseInterleaved(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, commandUsage(c))
		return exitOK
	}
	if err == nil {
		err = c.run(ctx, e, opts, positional)
	}
	var ue *usageError
	var xe *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return usageLine(stderr, "batchlock "+c.name, ue.msg, "batchlock "+c.name+" -h")
	case errors.As(err, &xe):
		return xe.code
	default:
		fmt.Fprintf(stderr, "batchlock %s: %v\n", c.name, err)
		return exitFailure
	}
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by run, in one line
	return fs
}

// parseInterleaved parses flags anywhere among the arguments, so that
// "unlock KEY --force" works as well as "unlock --force KEY". Arguments
// after "--" are all positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// plural counts n of noun: "1 lock", "2 locks", "0 locks".
func plural[N ~int | ~int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// commandUsage describes a command and its flags.
func commandUsage(c command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nFlags:\n", c.summary)
	fs := newFlagSet(c.name)
	c.flags(fs)
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}
