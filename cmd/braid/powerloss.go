package main

import "github.com/braidmq/braid/wal"

// powerLossFS, when set (a build with the braidpowerloss tag: the fault
// suite's), is the file system every node log is written through.
var powerLossFS wal.FS
