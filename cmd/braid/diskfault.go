package main

import (
	"log/slog"

	"github.com/braidmq/braid/wal"
)

// diskFaults, when set (a build with the braiddiskfault tag: the fault
// suite's), wraps the file system every node log is written through with
// faults a test turns on through a file in the data directory.
var diskFaults func(dataDir string, base wal.FS, log *slog.Logger) wal.FS
