package script

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/backoff"
)

const (
	// RetryWindow bounds the retries of one Run whose context has no
	// deadline: long enough to ride out a failover (a few seconds of
	// CLUSTERDOWN, MOVED and refused connections), short enough that a slot
	// left in migration or a master that stays down fails the call.
	RetryWindow = 10 * time.Second
	retryBase   = 5 * time.Millisecond
	retryMax    = 500 * time.Millisecond
)

// Sender makes one attempt at every call, setting its Reply and Acks.
type Sender interface {
	Send(ctx context.Context, s *redis.Script, calls []*Call, ack Ack)
}

// Runner runs scripts through a Sender, with retries.
type Runner struct {
	sender Sender
	master func(ctx context.Context, key string) (string, error)
	reload func(context.Context) // refreshes the cluster's map of slots; nil for one node
}

// New returns a Runner on rdb: a *redis.ClusterClient, or a *redis.Client for
// one node. Other clients are refused with an error naming their type.
func New(rdb redis.UniversalClient) (*Runner, error) {
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		return &Runner{
			sender: masters{r},
			master: func(ctx context.Context, key string) (string, error) {
				node, err := r.MasterForKey(ctx, key)
				if err != nil {
					return "", fmt.Errorf("%w: %w", errUnrouted, err)
				}
				return node.Options().Addr, nil
			},
			reload: func(ctx context.Context) { r.ReloadState(ctx) },
		}, nil
	case *redis.Client:
		return &Runner{sender: single{r}, master: oneNode}, nil
	}
	return nil, errUnsupported(rdb)
}

func oneNode(context.Context, string) (string, error) { return "", nil }

// NewWith returns a Runner on sender, which tests fake. master says which
// master serves a key (nil: one node); reload may be nil.
func NewWith(sender Sender, master func(ctx context.Context, key string) (string, error), reload func(context.Context)) *Runner {
	if master == nil {
		master = oneNode
	}
	return &Runner{sender: sender, master: master, reload: reload}
}

// Master returns the address of the master that serves key's slot, as the
// cluster client's map of slots has it ("" for one node): calls to one
// master go in one pipeline.
func (r *Runner) Master(ctx context.Context, key string) (string, error) {
	return r.master(ctx, key)
}

// Refresh asks for the cluster's map of slots to be reloaded, after a call
// failed in a way that suggests it moved; it returns at once.
func (r *Runner) Refresh(ctx context.Context) {
	if r.reload != nil {
		r.reload(ctx)
	}
}

// Send makes one attempt at every call.
func (r *Runner) Send(ctx context.Context, s *redis.Script, calls []*Call, ack Ack) {
	r.sender.Send(ctx, s, calls, ack)
	for _, c := range calls {
		c.Ran = c.Ran || !Refused(c.Reply.Err())
	}
}

// Run evaluates s once per call, sending again, with jittered backoff, the
// calls whose error is Retryable, while ctx lasts and for at most RetryWindow.
// Every script given to Run must be safe to repeat. Each call's Reply holds
// its final reply or error.
func (r *Runner) Run(ctx context.Context, s *redis.Script, calls []*Call, ack Ack) {
	began := time.Now()
	pending := calls
	for attempt := 0; ; attempt++ {
		r.Send(ctx, s, pending, ack)
		var again []*Call
		for _, c := range pending {
			if Retryable(c.Reply.Err()) {
				again = append(again, c)
			}
		}
		if len(again) == 0 || !r.Wait(ctx, began, attempt) {
			return
		}
		pending = again
	}
}

// Wait is the pause before attempt number attempt+1 of a round that began
// at began, for Run and for callers that plan their calls again (a slot
// found elsewhere): it refreshes the map of slots and sleeps a jittered
// backoff. It reports false, at once, when ctx is done or RetryWindow has
// passed since began.
func (r *Runner) Wait(ctx context.Context, began time.Time, attempt int) bool {
	left := RetryWindow - time.Since(began)
	if left <= 0 || ctx.Err() != nil {
		return false
	}
	r.Refresh(ctx)
	return backoff.Sleep(ctx, min(backoff.Jittered(attempt, retryBase, retryMax), left)) == nil
}
