//go:build braidpowerloss

package main

import "github.com/braidmq/braid/wal"

// The fault suite's power-loss build: writes stay in the process's
// memory until synced (wal.NewLazyFS), so that kill -9 loses exactly what
// a power cut would.
func init() { powerLossFS = wal.NewLazyFS(wal.OSFS) }
