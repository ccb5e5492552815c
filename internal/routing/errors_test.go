package routing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func TestRetryableAndRefused(t *testing.T) {
	for _, tc := range []struct {
		err       error
		retryable bool
		refused   bool // the server did not run the call
	}{
		{nil, false, false},
		{redisError("MOVED 3999 127.0.0.1:6381"), true, true},
		{redisError("ASK 3999 127.0.0.1:6381"), true, true},
		{redisError("TRYAGAIN Multiple keys request during rehashing of slot"), true, true},
		{redisError("CLUSTERDOWN The cluster is down"), true, true},
		{redisError("NOSCRIPT No matching script"), true, true},
		{redisError("LOADING Redis is loading the dataset in memory"), true, true},
		{redisError("READONLY You can't write against a read only replica."), true, true},
		{redisError("MASTERDOWN Link with MASTER is down"), true, true},
		{fmt.Errorf("route: %w", errUnrouted), true, true},
		{fmt.Errorf("get conn: %w", redis.ErrPoolTimeout), true, true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true, true},
		{io.EOF, true, false},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, true, false},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false, false},
		{redisError("ERR Error running script"), false, false},
		{fmt.Errorf("call: %w", context.Canceled), false, false},
		{context.DeadlineExceeded, false, false},
	} {
		if got := Retryable(tc.err); got != tc.retryable {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.retryable)
		}
		if got := Refused(tc.err); got != tc.refused {
			t.Errorf("Refused(%v) = %v, want %v", tc.err, got, tc.refused)
		}
	}
}

func TestDescribe(t *testing.T) {
	c := &Call{Slot: 42}
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		err  error
		want string
	}{
		{"migrating", context.Background, redisError("TRYAGAIN Multiple keys request during rehashing of slot"),
			"acquire: slot 42 is being migrated: TRYAGAIN Multiple keys request during rehashing of slot"},
		{"asked elsewhere", context.Background, redisError("ASK 42 127.0.0.1:1"), "acquire: slot 42 is being migrated: ASK 42 127.0.0.1:1"},
		{"moved", context.Background, redisError("MOVED 42 127.0.0.1:1"), "acquire: slot 42 moved: MOVED 42 127.0.0.1:1"},
		{"context ended", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, io.EOF, "acquire: slot 42: context canceled: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Describe(tc.ctx(), "acquire", c, tc.err)
			if err.Error() != tc.want {
				t.Errorf("got %q, want %q", err, tc.want)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("%v does not wrap %v", err, tc.err)
			}
		})
	}
}
