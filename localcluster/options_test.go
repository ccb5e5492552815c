package localcluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChooseBackend(t *testing.T) {
	yes := func() bool { return true }
	no := func() bool { return false }
	tests := []struct {
		name           string
		opt            Backend
		env            map[string]string
		docker, redis  func() bool
		want           Backend
		wantErr        error
		wantErrMessage string
	}{
		{name: "external env wins", opt: Process, env: map[string]string{EnvClusterAddrs: "127.0.0.1:7000"}, docker: yes, redis: yes, want: External},
		{name: "option before env", opt: Process, env: map[string]string{EnvBackend: "docker"}, docker: yes, redis: yes, want: Process},
		{name: "env backend", env: map[string]string{EnvBackend: "process"}, docker: yes, redis: yes, want: Process},
		{name: "docker when up", docker: yes, redis: yes, want: Docker},
		{name: "process without docker", docker: no, redis: yes, want: Process},
		{name: "nothing", docker: no, redis: no, wantErr: ErrNoBackend},
		{name: "unknown", env: map[string]string{EnvBackend: "podman"}, docker: yes, redis: yes, wantErrMessage: "unknown backend"},
		{name: "external without addrs", opt: External, docker: yes, redis: yes, wantErrMessage: EnvClusterAddrs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := newConfig([]Option{WithBackend(tt.opt)})
			got, err := chooseBackend(cfg, func(k string) string { return tt.env[k] }, tt.docker, tt.redis)
			switch {
			case tt.wantErr != nil:
				assert.ErrorIs(t, err, tt.wantErr)
			case tt.wantErrMessage != "":
				assert.ErrorContains(t, err, tt.wantErrMessage)
			default:
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
			}
		})
	}
}

func TestErrNoBackendSaysWhatToInstall(t *testing.T) {
	assert.Contains(t, ErrNoBackend.Error(), "redis-server")
	assert.Contains(t, ErrNoBackend.Error(), "Docker")
}

func TestExternalRefusesNonLoopback(t *testing.T) {
	// 192.0.2.0/24 is reserved for documentation: nothing may be sent there,
	// and nothing is, since the address is refused before any dial.
	t.Setenv(EnvClusterAddrs, "192.0.2.1:7000")
	_, err := Start(context.Background())
	assert.ErrorContains(t, err, "not a loopback address")
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7000":  true,
		"127.1.2.3:7000":  true,
		"[::1]:7000":      true,
		"localhost:7000":  true,
		"10.0.0.1:7000":   false,
		"172.17.0.2:7000": false,
		"example.com:80":  false,
		"127.0.0.1":       false,
	} {
		err := checkLoopback(addr)
		assert.Equal(t, ok, err == nil, "%s: %v", addr, err)
	}
}

func TestWithLogfNilKeepsSilence(t *testing.T) {
	cfg := newConfig([]Option{WithLogf(nil)})
	require.NotNil(t, cfg.logf)
	cfg.logf("no panic %d", 1)
	var got string
	cfg = newConfig([]Option{WithLogf(func(f string, a ...any) { got = f })})
	cfg.logf("x")
	assert.Equal(t, "x", got)
}

func TestWithReplicasPerMaster(t *testing.T) {
	assert.Equal(t, 1, newConfig(nil).replicas, "default")
	assert.Equal(t, 2, newConfig([]Option{WithReplicasPerMaster(2)}).replicas)
	for _, n := range []int{0, -1} {
		// Refused before any backend is chosen: nothing starts, even with
		// an unknown backend or an external cluster named.
		t.Setenv(EnvBackend, "podman")
		_, err := Start(context.Background(), WithReplicasPerMaster(n))
		assert.ErrorContains(t, err, "need at least one replica per master")
		err = Create(context.Background(), []string{"127.0.0.1:1", "127.0.0.1:2"}, WithReplicasPerMaster(n))
		assert.ErrorContains(t, err, "need at least one replica per master")
	}
}

func TestWithMasters(t *testing.T) {
	assert.Equal(t, 3, newConfig(nil).masters, "default")
	assert.Equal(t, 9, newConfig([]Option{WithMasters(9)}).masters)
	for _, n := range []int{2, 0, -1} {
		// Refused before any backend is chosen, as WithReplicasPerMaster is.
		t.Setenv(EnvBackend, "podman")
		_, err := Start(context.Background(), WithMasters(n))
		assert.ErrorContains(t, err, "need at least three masters")
	}
}

func TestCreateNeedsWholeGroups(t *testing.T) {
	// Checked before any address is dialled.
	err := Create(context.Background(), []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"}, WithReplicasPerMaster(2))
	assert.ErrorContains(t, err, "multiple of 3 nodes, got 4")
	err = Create(context.Background(), []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"})
	assert.ErrorContains(t, err, "multiple of 2 nodes, got 3")
}

func TestPromoteOption(t *testing.T) {
	cfg := failoverConfig{mode: "FORCE"}
	for _, o := range []FailoverOption{Promote("127.0.0.1:20007"), Takeover()} {
		o.applyFailover(&cfg)
	}
	assert.Equal(t, failoverConfig{mode: "TAKEOVER", promote: "127.0.0.1:20007"}, cfg)
	Graceful().applyFailover(&cfg)
	assert.Equal(t, failoverConfig{promote: "127.0.0.1:20007"}, cfg, "CLUSTER FAILOVER with no option")
}

func TestServerChosen(t *testing.T) {
	tests := []struct {
		name    string
		env     string
		opts    []Option
		want    Server
		wantErr string
	}{
		{name: "default", want: Redis70},
		{name: "env", env: "valkey-8.1", want: Valkey81},
		{name: "option before env", env: "valkey-8.1", opts: []Option{WithServer(Redis80)}, want: Redis80},
		{name: "unknown env", env: "keydb-6", wantErr: `server "keydb-6": want redis-7.0, valkey-8.1 or redis-8.0 (BATCHLOCK_SERVER)`},
		{name: "unknown option", opts: []Option{WithServer("valkey")}, wantErr: `server "valkey"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvServer, tt.env)
			cfg := newConfig(tt.opts)
			err := cfg.check()
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, cfg.server)
		})
	}
}

func TestTrixieArgvRunsTheBinaryThroughTheTreesLoader(t *testing.T) {
	root := t.TempDir()
	assert.Equal(t, []string{root + "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "--library-path", root + "/usr/lib/x86_64-linux-gnu",
		"--argv0", "valkey-server", root + "/usr/bin/valkey-server"}, trixieArgv(root, Valkey81))
	assert.Equal(t, "redis-server", trixieArgv(root, Redis80)[4])
}
