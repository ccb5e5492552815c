// Command localcluster runs a throwaway Redis Cluster for development.
//
//	localcluster up [-masters N]     start a cluster of N masters (3), each
//	                                 with a replica, print its addresses,
//	                                 stop it on Ctrl-C
//	localcluster create ADDR,ADDR... build a cluster from fresh nodes
//	                                 (first half masters), as make cluster-up does
//
// Both print the BATCHLOCK_CLUSTER_ADDRS line to export. The backend of
// "up" follows the localcluster rules (BATCHLOCK_BACKEND, docker, process).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/batchlock/batchlock/localcluster"
)

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "up":
		fs := flag.NewFlagSet("up", flag.ExitOnError)
		masters := fs.Int("masters", 3, "masters of the cluster, each with a replica")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() > 0 {
			usage()
		}
		if err := up(ctx, *masters); err != nil {
			log.Fatal(err)
		}
	case "create":
		if len(os.Args) != 3 {
			usage()
		}
		addrs := strings.Split(os.Args[2], ",")
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := localcluster.Create(cctx, addrs, localcluster.WithLogf(log.Printf)); err != nil {
			log.Fatal(err)
		}
		printAddrs(addrs)
	default:
		usage()
	}
}

func up(ctx context.Context, masters int) error {
	c, err := localcluster.Start(ctx, localcluster.WithLogf(log.Printf), localcluster.WithMasters(masters))
	if err != nil {
		return err
	}
	defer c.Close()
	printAddrs(c.Addrs())
	log.Printf("%s backend; Ctrl-C stops and removes the cluster", c.Backend())
	<-ctx.Done()
	return c.Close()
}

func printAddrs(addrs []string) {
	fmt.Printf("%s=%s\n", localcluster.EnvClusterAddrs, strings.Join(addrs, ","))
}

func usage() {
	log.Fatal("usage: localcluster up [-masters N] | localcluster create ADDR,ADDR,...")
}
