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

Without --addrs, every command uses $BATCHLOCK_CLUSTER_ADDRS; demo, when
that is not set either, starts a throwaway six-node cluster of its own and
removes it afterwards.

Exit codes: 0 success, 1 failure (including a failed audit), 2 usage error.
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

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError carries an exit code other than 1 for a failure already
// reported (such as a failed audit, whose report says it all).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			if c, ok := findCommand(rest[0]); ok {
				fmt.Fprint(stdout, commandUsage(c))
				return exitOK
			}
			fmt.Fprintf(stderr, "batchlock: unknown command %q\n\n%s", rest[0], usage)
			return exitUsage
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	c, ok := findCommand(name)
	if !ok {
		fmt.Fprintf(stderr, "batchlock: unknown command %q\n\n%s", name, usage)
		return exitUsage
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
		fmt.Fprintf(stderr, "batchlock %s: %s\n\n%s", c.name, ue.msg, commandUsage(c))
		return exitUsage
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
	fs.SetOutput(io.Discard) // errors are reported by run, with the usage
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
