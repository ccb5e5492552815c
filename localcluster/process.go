package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// processLauncher runs nodes as redis-server children, each with a
// directory under one temporary root.
type processLauncher struct {
	argv []string // the server's command, its config file to follow
	root string
}

func newProcessLauncher(ctx context.Context, id string, cfg config) (*processLauncher, error) {
	argv, err := serverCommand(ctx, cfg.server, cfg.logf)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(os.TempDir(), "batchlock-localcluster-"+id)
	if err := os.Mkdir(root, 0o700); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	return &processLauncher{argv: argv, root: root}, nil
}

func (l *processLauncher) launch(ctx context.Context, port int, cluster bool) (server, error) {
	dir := filepath.Join(l.root, strconv.Itoa(port))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	nc := nodeConfig{Port: port, Dir: dir, LogFile: filepath.Join(dir, "redis.log"), Cluster: cluster}
	conf := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(nc.file()), 0o600); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	p := &process{argv: l.argv, conf: conf, dir: dir, log: nc.LogFile}
	if err := p.start(ctx); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return p, nil
}

func (l *processLauncher) close() error {
	if err := os.RemoveAll(l.root); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	return nil
}

// process is one server child.
type process struct {
	argv           []string
	conf, dir, log string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

func (p *process) start(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return errors.New("already running")
	}
	// Not CommandContext: the node must outlive the ctx of the call that
	// started it.
	cmd := exec.Command(p.argv[0], append(p.argv[1:], p.conf)...)
	cmd.Dir = p.dir
	// If the test binary dies without Close (a panic, a timeout), the
	// kernel kills the nodes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // killed on purpose or crashed: the log tells which
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *process) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *process) running(context.Context) (bool, error) {
	cmd, done := p.current()
	return cmd != nil && !closed(done), nil
}

func (p *process) signal(sig syscall.Signal) error {
	cmd, done := p.current()
	if cmd == nil || closed(done) {
		return errors.New("not running")
	}
	return cmd.Process.Signal(sig)
}

func (p *process) freeze(context.Context) error { return p.signal(syscall.SIGSTOP) }
func (p *process) thaw(context.Context) error   { return p.signal(syscall.SIGCONT) }

// kill works on a stopped process too: SIGKILL needs no SIGCONT.
func (p *process) kill(ctx context.Context) error {
	cmd, done := p.current()
	if cmd == nil || closed(done) {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *process) remove(ctx context.Context) error {
	return errors.Join(p.kill(ctx), os.RemoveAll(p.dir))
}

// logTail returns the last lines of the node's log.
func (p *process) logTail(context.Context) string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	return tail(f, 10)
}

// tail returns the last n lines of r, read from its last 4 KiB.
func tail(r io.ReadSeeker, n int) string {
	if end, err := r.Seek(0, io.SeekEnd); err == nil && end > 4096 {
		_, _ = r.Seek(end-4096, io.SeekStart)
	} else {
		_, _ = r.Seek(0, io.SeekStart)
	}
	b, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
