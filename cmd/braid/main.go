// Command braid runs and drives a Braid server.
//
//	braid serve [--config braid.conf] [--data-dir ./data] [--nats-listen 127.0.0.1:4222 | --nats-url URL] ...
//	braid topic create|describe|list|split|merge|rebucket|delete|stats|verify|policies|compact|compaction|partitions|migrate ...
//	braid tenant create|list   braid namespace create|list|policies
//	braid produce ...   braid consume ...   braid node list|drain   braid bench   braid version
//
// Every command but serve talks to a running server over NATS (--server,
// default $NATS_URL, the selected nats context's, or nats://127.0.0.1:4222).
// 'braid <command> -h' shows a command's flags; docs/cli.md's CLI reference is
// made from the same help (docs.go).
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "braid:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line the command refuses (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }
