package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Server is the server a cluster's nodes run, and its version.
type Server string

const (
	// Redis70 is the host's redis-server (Redis 7.0 from Debian 12), or,
	// on the docker backend, the image [WithImage] describes.
	Redis70 Server = "redis-7.0"
	// Valkey81 is Valkey 8.1 from Debian 13's valkey-server package.
	Valkey81 Server = "valkey-8.1"
	// Redis80 is Redis 8.0 from Debian 13's redis-server package.
	Redis80 Server = "redis-8.0"
)

// EnvServer chooses the server when [WithServer] does not: one of
// redis-7.0 (the default), valkey-8.1 and redis-8.0.
const EnvServer = "BATCHLOCK_SERVER"

// WithServer sets the server the nodes run. Default: BATCHLOCK_SERVER if
// set, else Redis70. Valkey81 and Redis80 run from a tree of Debian 13
// (trixie) built once with mmdebstrap from Debian's packages and kept in
// the user's cache directory ("batchlock/trixie"): the process backend runs
// its binary with the tree's own dynamic loader and libraries, the docker
// backend an image imported from it (TrixieImage). Another value makes
// Start return an error before starting anything.
func WithServer(s Server) Option {
	return optionFunc(func(c *config) { c.server = s })
}

// TrixieImage is the docker backend's image of Valkey81 and Redis80: the
// trixie tree, imported once and reused.
const TrixieImage = "batchlock/servers:trixie"

// trixie is the tree of Debian 13 that holds valkey-server and
// redis-server: its suite and packages.
var trixie = struct{ suite, packages string }{suite: "trixie", packages: "valkey-server,redis-server"}

// checkServer refuses a server this package cannot start.
func checkServer(s Server) error {
	switch s {
	case Redis70, Valkey81, Redis80:
		return nil
	}
	return fmt.Errorf("localcluster: server %q: want %s, %s or %s (%s)", s, Redis70, Valkey81, Redis80, EnvServer)
}

// name splits the server's name: "valkey" and "8.1" of valkey-8.1.
func (s Server) name() (server, version string) {
	server, version, _ = strings.Cut(string(s), "-")
	return server, version
}

// binary is the server's program name, as its argv[0] and on the
// image's PATH.
func (s Server) binary() string {
	server, _ := s.name()
	return server + "-server"
}

// fromTrixie says whether the server runs from the trixie tree.
func (s Server) fromTrixie() bool { return s == Valkey81 || s == Redis80 }

// keepsShardIDs says whether the server's nodes agree on shard IDs, which
// they write in nodes.conf (Redis 7.2 and later, Valkey: every server here
// but Redis 7.0): a cluster is ready only once they agree (see
// view.shardsAgree).
func (s Server) keepsShardIDs() bool { return s != Redis70 }

// serverCommand returns the argv that runs the server with conf: the
// host's redis-server, or the trixie tree's binary through the tree's
// dynamic loader and libraries, so that it needs nothing of the host's
// (trixie's glibc is newer than Debian 12's).
func serverCommand(ctx context.Context, s Server, logf func(string, ...any)) ([]string, error) {
	if !s.fromTrixie() {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, fmt.Errorf("%w (process backend: %v)", ErrNoBackend, err)
		}
		return []string{bin}, nil
	}
	_, argv, err := trixieServer(ctx, s, logf)
	return argv, err
}

// trixieServer returns the trixie tree's archive and the argv that runs s
// from the tree, once --version shows the version s names.
func trixieServer(ctx context.Context, s Server, logf func(string, ...any)) (archive string, argv []string, err error) {
	root, archive, err := trixieTree(ctx, logf)
	if err != nil {
		return "", nil, err
	}
	argv = trixieArgv(root, s)
	out, err := exec.CommandContext(ctx, argv[0], append(argv[1:], "--version")...).Output()
	if err != nil {
		return "", nil, fmt.Errorf("localcluster: %s --version: %w", s, err)
	}
	// "Valkey server v=8.1.1 sha=..." for valkey-8.1.
	server, version := s.name()
	if want := server + " server v=" + version + "."; !strings.HasPrefix(strings.ToLower(string(out)), want) {
		return "", nil, fmt.Errorf("localcluster: %s: the trixie tree's %s is %q, not %s*", s, s.binary(), strings.TrimSpace(string(out)), want)
	}
	return archive, argv, nil
}

// trixieArgv is the loader's command line that runs s from the tree at
// root. The program names are links to the check tools, which pick their
// mode from argv[0]: the loader is told the name.
func trixieArgv(root string, s Server) []string {
	libs := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	bin := filepath.Join(root, "usr/bin", s.binary())
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		bin = real
	}
	return []string{filepath.Join(libs, "ld-linux-x86-64.so.2"), "--library-path", libs, "--argv0", s.binary(), bin}
}

// trixieTree returns the trixie tree's root directory and the tar it was
// unpacked from, building both once: mmdebstrap writes the tar (about
// 140 MB, half a minute), which is unpacked beside it. Test binaries
// running at once build it once: the first holds a lock on the cache.
func trixieTree(ctx context.Context, logf func(string, ...any)) (root, archive string, err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", "", fmt.Errorf("localcluster: the trixie tree: %w", err)
	}
	dir := filepath.Join(cache, "batchlock", trixie.suite)
	root, archive = filepath.Join(dir, "root"), filepath.Join(dir, "servers.tar")
	done := filepath.Join(dir, "complete")
	if _, err := os.Stat(done); err == nil {
		return root, archive, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("localcluster: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", "", fmt.Errorf("localcluster: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", "", fmt.Errorf("localcluster: lock %s: %w", dir, err)
	}
	if _, err := os.Stat(done); err == nil {
		return root, archive, nil // built while this one waited
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", "", fmt.Errorf("%w (the %s servers need mmdebstrap: apt-get install mmdebstrap)", ErrNoBackend, trixie.suite)
	}
	logf("localcluster: building the %s tree (%s) in %s with mmdebstrap", trixie.suite, trixie.packages, dir)
	// What a build cut short left.
	if err := os.RemoveAll(root); err != nil {
		return "", "", fmt.Errorf("localcluster: %w", err)
	}
	if err := os.Remove(archive); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("localcluster: %w", err)
	}
	steps := [][]string{
		{"mmdebstrap", "--quiet", "--variant=minbase", "--include=" + trixie.packages, trixie.suite, archive},
		{"mkdir", "-p", root},
		// Device nodes are neither needed nor always allowed.
		{"tar", "-C", root, "-xf", archive, "--exclude=./dev/*"},
	}
	for _, argv := range steps {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("localcluster: %s: %w: %s", strings.Join(argv, " "), err, tail(strings.NewReader(string(out)), 10))
		}
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", "", fmt.Errorf("localcluster: %w", err)
	}
	return root, archive, nil
}
