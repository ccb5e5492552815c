package localcluster

import "context"

// launcher runs the nodes of one cluster on one backend.
type launcher interface {
	// launch creates a node listening on port and starts it; the node may
	// not answer yet.
	launch(ctx context.Context, port int, cluster bool) (server, error)
	// close releases what the launcher holds once every node is removed.
	close() error
}

// server is one node's redis-server, whatever runs it.
type server interface {
	start(ctx context.Context) error // start again after kill, same data
	running(ctx context.Context) (bool, error)
	logTail(ctx context.Context) string // last lines of its log, for errors
	freeze(ctx context.Context) error
	thaw(ctx context.Context) error
	kill(ctx context.Context) error   // gone at once, data kept; no-op if not running
	remove(ctx context.Context) error // gone with its data; no-op if already removed
}
