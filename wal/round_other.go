//go:build !linux

package wal

import (
	"errors"
	"os"
)

// syncFS is not to be had here; deviceOf answers 0, so no file is
// ever synced through it.
func syncFS(d *os.File) error { return errors.New("braid/wal: syncfs is Linux only") }

// deviceOf returns 0: every file syncs on its own.
func deviceOf(f *os.File) uint64 { return 0 }
