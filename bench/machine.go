package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/batchlock/batchlock/localcluster"
)

// Machine says where numbers came from.
type Machine struct {
	Arch    string // uname -m
	CPU     string // model name in /proc/cpuinfo
	Cores   int
	Go      string
	Redis   string
	Backend localcluster.Backend
	Nodes   int
	// Load is /proc/loadavg's 1-minute average before the run: other work
	// on the machine shows here.
	Load string
	// Library is the commit of batchlock measured, from git.
	Library string
}

// DescribeMachine gathers what the report says of the machine and cluster.
func DescribeMachine(ctx context.Context, cl *localcluster.Cluster) (Machine, error) {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Backend: cl.Backend(), Arch: runtime.GOARCH, CPU: "unknown"}
	if out, err := exec.CommandContext(ctx, "uname", "-m").Output(); err == nil {
		m.Arch = strings.TrimSpace(string(out))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	m.Library = libraryVersion(ctx)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			m.Load = f[0]
		}
	}
	addrs := cl.Addrs()
	m.Nodes = len(addrs)
	if len(addrs) == 0 {
		return m, fmt.Errorf("cluster has no nodes")
	}
	reply, err := cl.Do(ctx, addrs[0], "INFO", "server")
	if err != nil {
		return m, err
	}
	m.Redis = ParseInfo(fmt.Sprint(reply))["redis_version"]
	return m, nil
}

// libraryVersion names the last commit of batchlock's own packages, and says
// when the working tree changes them.
func libraryVersion(ctx context.Context) string {
	paths := []string{"--", "../batchlock", "../hashtag", "../internal"}
	out, err := exec.CommandContext(ctx, "git", append([]string{"log", "-1", "--format=%h"}, paths...)...).Output()
	if err != nil || len(out) == 0 {
		return "unknown"
	}
	v := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", append([]string{"status", "--porcelain"}, paths...)...).Output(); err == nil && len(st) > 0 {
		v += " with uncommitted changes"
	}
	return v
}

func (m Machine) String() string {
	return fmt.Sprintf("%s, %s, %d cores, %s, Redis %s; %d-node cluster (%s backend) on the same machine; load average %s before the run",
		m.Arch, m.CPU, m.Cores, m.Go, m.Redis, m.Nodes, m.Backend, m.Load)
}
