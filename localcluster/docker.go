package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

const (
	// LabelKey marks every container this package starts, so leftovers of
	// a killed test binary can be found: docker rm -f $(docker ps -aq
	// --filter label=batchlock.localcluster=1).
	LabelKey = "batchlock.localcluster"
	// LabelID carries the [Cluster.ID] of a container's cluster.
	LabelID = "batchlock.localcluster.id"
)

// disableRyuk keeps testcontainers from starting its reaper, whose image
// cannot be pulled without a registry. Containers are removed by Close
// instead. It must run before testcontainers reads its configuration.
func disableRyuk() {
	if _, ok := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !ok {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
}

// dockerProbe bounds the check for a daemon, so a missing one costs little.
const dockerProbe = 3 * time.Second

func dockerUp(ctx context.Context, logf func(format string, args ...any)) bool {
	ctx, cancel := context.WithTimeout(ctx, dockerProbe)
	defer cancel()
	cli, err := dockerClient(ctx, logf)
	if err != nil {
		return false
	}
	return cli.Close() == nil
}

// dockerClient connects to the daemon. testcontainers' own messages (such as
// the banner it prints on connecting) go to logf: its logger is global, so
// the last cluster started decides.
func dockerClient(ctx context.Context, logf func(format string, args ...any)) (*testcontainers.DockerClient, error) {
	disableRyuk()
	tclog.SetDefault(logfLogger(logf))
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return nil, errors.Join(err, cli.Close())
	}
	return cli, nil
}

// dockerLauncher runs nodes as containers on the host network.
type dockerLauncher struct {
	cli    *testcontainers.DockerClient
	image  string
	server Server
	id     string
}

func newDockerLauncher(ctx context.Context, id string, cfg config) (*dockerLauncher, error) {
	pctx, cancel := context.WithTimeout(ctx, dockerProbe)
	defer cancel()
	cli, err := dockerClient(pctx, cfg.logf)
	if err != nil {
		return nil, fmt.Errorf("%w (docker backend: %v)", ErrNoBackend, err)
	}
	image, err := ensureImage(ctx, cli, cfg)
	if err != nil {
		return nil, errors.Join(err, cli.Close())
	}
	return &dockerLauncher{cli: cli, image: image, server: cfg.server, id: id}, nil
}

func (l *dockerLauncher) launch(ctx context.Context, port int, cluster bool) (server, error) {
	nc := nodeConfig{Port: port, Dir: imageWorkDir, Cluster: cluster}
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:  l.image,
			Name:   fmt.Sprintf("batchlock-%s-%d", l.id, port),
			Cmd:    append([]string{l.server.binary()}, nc.args()...),
			Labels: map[string]string{LabelKey: "1", LabelID: l.id},
			// Host networking: nodes are reached and announce themselves on
			// 127.0.0.1, never on a container address.
			HostConfigModifier: func(hc *container.HostConfig) { hc.NetworkMode = "host" },
		},
		Started: true,
		// Per-container chatter; failures come back as errors.
		Logger: tclog.NewNoopLogger(),
	}
	ctr, err := testcontainers.GenericContainer(ctx, req)
	if err != nil {
		if ctr != nil {
			err = errors.Join(err, ctr.Terminate(context.WithoutCancel(ctx)))
		}
		return nil, fmt.Errorf("localcluster: container for port %d: %w", port, err)
	}
	return &containerNode{cli: l.cli, ctr: ctr}, nil
}

func (l *dockerLauncher) close() error { return l.cli.Close() }

// containerNode is one node's container. Kill stops the container and
// Restart starts it again, so its filesystem (nodes.conf) survives.
type containerNode struct {
	cli *testcontainers.DockerClient
	ctr testcontainers.Container

	mu      sync.Mutex
	removed bool
}

func (n *containerNode) id() string { return n.ctr.GetContainerID() }

func (n *containerNode) start(ctx context.Context) error {
	_, err := n.cli.ContainerStart(ctx, n.id(), client.ContainerStartOptions{})
	return err
}

func (n *containerNode) state(ctx context.Context) (*container.State, error) {
	res, err := n.cli.ContainerInspect(ctx, n.id(), client.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	if res.Container.State == nil {
		return nil, errors.New("container has no state")
	}
	return res.Container.State, nil
}

func (n *containerNode) running(ctx context.Context) (bool, error) {
	st, err := n.state(ctx)
	if err != nil {
		return false, err
	}
	return st.Running, nil
}

func (n *containerNode) freeze(ctx context.Context) error {
	_, err := n.cli.ContainerPause(ctx, n.id(), client.ContainerPauseOptions{})
	return err
}

func (n *containerNode) thaw(ctx context.Context) error {
	_, err := n.cli.ContainerUnpause(ctx, n.id(), client.ContainerUnpauseOptions{})
	return err
}

// kill unpauses first: the engine refuses to signal a paused container.
func (n *containerNode) kill(ctx context.Context) error {
	st, err := n.state(ctx)
	if err != nil {
		return err
	}
	if !st.Running {
		return nil
	}
	if st.Paused {
		if err := n.thaw(ctx); err != nil {
			return err
		}
	}
	if _, err := n.cli.ContainerKill(ctx, n.id(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return err
	}
	return waitFor(ctx, "container "+n.id()+" stopping", func(ctx context.Context) error {
		if up, err := n.running(ctx); err != nil || up {
			return fmt.Errorf("still running (%v)", err)
		}
		return nil
	})
}

func (n *containerNode) remove(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.removed {
		return nil
	}
	if st, err := n.state(ctx); err == nil && st.Paused {
		_ = n.thaw(ctx) // Terminate's stop would wait on a paused container
	}
	// An engine under load has been seen to leave a stop unanswered for
	// minutes (CI, docker 20.10); a forced remove kills and removes in one
	// step, without waiting on the stop.
	sctx, cancel := context.WithTimeout(ctx, stopPatience)
	err := n.ctr.Terminate(sctx, testcontainers.StopTimeout(0))
	cancel()
	if err != nil {
		if _, rerr := n.cli.ContainerRemove(ctx, n.id(), client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			return errors.Join(err, rerr)
		}
	}
	n.removed = true
	return nil
}

// stopPatience bounds a container's stop in Close before it is removed by
// force.
const stopPatience = 15 * time.Second

func (n *containerNode) logTail(ctx context.Context) string {
	rc, err := n.ctr.Logs(ctx)
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err.Error()
	}
	return tail(strings.NewReader(string(b)), 10)
}

// logfLogger sends testcontainers' messages to the WithLogf function.
type logfLogger func(format string, args ...any)

func (f logfLogger) Printf(format string, args ...any) { f(format, args...) }
