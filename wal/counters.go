package wal

import "sync/atomic"

// IOCounts counts the file system calls of every log of the process: what
// group commit saves is seen here (records per write, records per fsync).
type IOCounts struct {
	Writes uint64 // write calls to log files
	Syncs  uint64 // fsyncs of log files (not of directories)
}

var ioWrites, ioSyncs atomic.Uint64

// Counts returns the process's IOCounts so far.
func Counts() IOCounts { return IOCounts{Writes: ioWrites.Load(), Syncs: ioSyncs.Load()} }
