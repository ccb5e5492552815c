package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotInstalled means no PostgreSQL server binaries were found.
var ErrNotInstalled = errors.New("pgserver: no PostgreSQL server (initdb, postgres) on PATH or in /usr/lib/postgresql/*/bin: " +
	"install it with apt-get install postgresql (make deps does)")

// startAttempts bounds the retries when the port picked free was taken
// before the server bound it.
const startAttempts = 3

// stopTimeout bounds a fast shutdown before the server is killed.
const stopTimeout = 10 * time.Second

// Server is a running throwaway PostgreSQL server.
type Server struct {
	dir  string // removed by Close
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

// Start initialises a database cluster in a fresh temporary directory and
// starts a server on it, listening on 127.0.0.1 only, and returns once it
// accepts connections. The server is killed with the calling process should
// that die without Close.
func Start(ctx context.Context) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "batchlock-pgserver-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s, err := start(ctx, bin, dir, cred)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

func start(ctx context.Context, bin, dir string, cred *syscall.Credential) (*Server, error) {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgserver: initdb: %w\n%s", err, out)
	}
	var errs []error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{dir: dir, port: port}
		if err := s.launch(bin, data, cred); err != nil {
			return nil, err
		}
		err = s.waitReady(ctx)
		if err == nil {
			return s, nil
		}
		errs = append(errs, errors.Join(err, s.stop()))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// launch starts the server. Not CommandContext: the server must outlive
// the ctx of Start.
func (s *Server) launch(bin, data string, cred *syscall.Credential) error {
	log, err := os.OpenFile(s.logFile(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir,
		"-c", "max_connections=200", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off")
	cmd.Stdout, cmd.Stderr = log, log
	// SIGQUIT is PostgreSQL's immediate shutdown: if the caller dies
	// without Close, the server goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait() // stopped on purpose or failed: the log tells which
		close(s.done)
	}()
	return nil
}

// waitReady polls until the server accepts a connection, exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, s.URL())
		cancel()
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.done:
			return fmt.Errorf("pgserver: the server exited at start:\n%s", s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("pgserver: waiting for the server on port %d: %w (last: %v)\n%s", s.port, ctx.Err(), err, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns the connection string of the server's postgres database, as
// the superuser postgres.
func (s *Server) URL() string { return s.DatabaseURL("postgres") }

// DatabaseURL returns the connection string of database name.
func (s *Server) DatabaseURL(name string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: s.Addr(),
		Path: "/" + name, RawQuery: "sslmode=disable"}
	return u.String()
}

// CreateDatabase creates an empty database and returns its connection
// string: one per test keeps tests apart on one server.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return "", fmt.Errorf("pgserver: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgserver: creating database %s: %w", name, err)
	}
	return s.DatabaseURL(name), nil
}

// Close stops the server (a fast shutdown, which ends open sessions) and
// removes its directory.
func (s *Server) Close() error {
	return errors.Join(s.stop(), os.RemoveAll(s.dir))
}

func (s *Server) stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	// SIGINT is PostgreSQL's fast shutdown: sessions are ended, their
	// transactions rolled back.
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgserver: %w", err)
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	return fmt.Errorf("pgserver: killed after %v: it did not shut down\n%s", stopTimeout, s.logTail())
}

func (s *Server) logFile() string { return filepath.Join(s.dir, "postgres.log") }

// logTail returns the last lines of the server's log, for errors.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logFile())
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-10, 0):], "\n")
}

// binDir finds the server binaries: on PATH, else the newest of Debian's
// versioned directories.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", ErrNotInstalled
}

// version reads the major version of /usr/lib/postgresql/<version>/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// runAs returns the credentials the server runs with: the postgres user's
// when root, else none (the caller's own).
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: PostgreSQL refuses to run as root, and there is no postgres user to run it as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgserver: uid of postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgserver: gid of postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
