// Package cli is what the batchlock commands share: their command lines
// (usage errors, flags among arguments, exit codes) and their way to a
// cluster (--addrs, --prefix, seeds that answer).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // a runtime failure, or a failed audit
	ExitUsage   = 2
)

// Command is one command of a program.
type Command struct {
	Name    string
	Summary string
	Flags   func(*flag.FlagSet) any // defines the flags, returns the values' holder
	Run     func(ctx context.Context, env *Env, opts any, args []string) error
}

// Env is what a command writes to.
type Env struct {
	Stdout, Stderr io.Writer
}

// Program is a command line of several commands: NAME COMMAND [flags].
type Program struct {
	Name     string
	Usage    string
	Commands []Command
}

// UsageError is a mistake in the command line: exit code 2. Err, if any,
// is the error it reports.
type UsageError struct {
	Msg string
	Err error
}

func (e *UsageError) Error() string { return e.Msg }

func (e *UsageError) Unwrap() error { return e.Err }

// Usagef is a UsageError saying what is wrong.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ExitError carries an exit code for a failure already reported (such as a
// failed audit, whose report says it all).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// usageLine reports a usage error on w in one line, "WHO: PROBLEM; see
// SEE", SEE being the command line that prints the full usage, and returns
// exitUsage.
func usageLine(w io.Writer, who, problem, see string) int {
	fmt.Fprintf(w, "%s: %s; see %s\n", who, oneLine(problem), see)
	return ExitUsage
}

// oneLine joins the lines of msg (a joined error has several) with "; ".
func oneLine(msg string) string {
	return strings.Join(strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
}

// commandNames lists the commands, for a usage error that names them.
func (p Program) commandNames() string {
	var names []string
	for _, c := range p.Commands {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// Main runs a program's command line, run, with os.Args, stopped by
// SIGINT or SIGTERM, and exits with its code. go-redis's own log lines are
// silenced: it logs dial failures and retries itself, and a command reports
// each error once.
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Run runs the command line args (without the program's name) and returns
// its exit code.
func (p Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageLine(stderr, p.Name, "no command given (one of "+p.commandNames()+")", p.Name+" help")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			if c, ok := p.find(rest[0]); ok {
				fmt.Fprint(stdout, commandUsage(c))
				return ExitOK
			}
			return usageLine(stderr, p.Name, fmt.Sprintf("unknown command %q (want one of %s)", rest[0], p.commandNames()), p.Name+" help")
		}
		fmt.Fprint(stdout, p.Usage)
		return ExitOK
	}
	c, ok := p.find(name)
	if !ok {
		return usageLine(stderr, p.Name, fmt.Sprintf("unknown command %q (want one of %s)", name, p.commandNames()), p.Name+" help")
	}
	return RunCommand(ctx, p.Name+" "+c.Name, c, rest, stdout, stderr)
}

// RunCommand runs one command, called who in its messages, on args, and
// returns its exit code: a program of one command runs it so.
func RunCommand(ctx context.Context, who string, c Command, args []string, stdout, stderr io.Writer) int {
	e := &Env{Stdout: stdout, Stderr: stderr}
	fs := newFlagSet(c.Name)
	opts := c.Flags(fs)
	positional, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, commandUsage(c))
		return ExitOK
	}
	if err == nil {
		err = c.Run(ctx, e, opts, positional)
	}
	var ue *UsageError
	var xe *ExitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return usageLine(stderr, who, ue.Msg, who+" -h")
	case errors.As(err, &xe):
		return xe.Code
	default:
		fmt.Fprintf(stderr, "%s: %v\n", who, err)
		return ExitFailure
	}
}

func (p Program) find(name string) (Command, bool) {
	for _, c := range p.Commands {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
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
			return nil, &UsageError{Msg: err.Error()}
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

// Plural counts n of noun: "1 lock", "2 locks", "0 locks".
func Plural[N ~int | ~int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// commandUsage describes a command and its flags.
func commandUsage(c Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nFlags:\n", c.Summary)
	fs := newFlagSet(c.Name)
	c.Flags(fs)
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}
