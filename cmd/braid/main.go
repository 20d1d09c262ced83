// Command braid runs and drives a Braid server.
//
//	braid serve [--data-dir ./data] [--nats-listen 127.0.0.1:4222 | --nats-url URL] [--metrics-listen 127.0.0.1:9470]
//	braid topic create|describe|list|split|merge|rebucket|delete|stats|policies ...
//	braid namespace policies ...
//	braid produce ...   braid consume ...   braid bench ...
//
// Every command but serve talks to a running server over NATS (--server,
// default nats://127.0.0.1:4222).
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		err = serve(args)
	case "topic":
		err = topicCmd(args)
	case "namespace":
		err = namespaceCmd(args)
	case "produce":
		err = produceCmd(args)
	case "consume":
		err = consumeCmd(args)
	case "node":
		err = nodeCmd(args)
	case "bench":
		err = benchCmd(args)
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "braid: unknown command %q\n\n", cmd)
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "braid:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: braid <command> [flags]

commands:
  serve      run a Braid server (embedded NATS by default)
  topic      create | describe | list | split | merge | rebucket | delete | stats | policies
  namespace  policies
  produce    send messages (from stdin, one per line, or generated)
  consume    read a topic: stream or queue subscription, or checkpoint consumer
  bench      produce/consume throughput against a running server
  node       list the cluster's nodes

run 'braid <command> -h' for the flags of a command.
`)
}
