package main

import (
	"log/slog"

	"github.com/braidmq/braid/clock"
)

// steppedClock, when set (a build with the braidclockstep tag: the fault
// suite's), makes the clock the node's lease and entry role go by, whose
// wall clock a test steps through a file in the data directory.
var steppedClock func(dataDir string, log *slog.Logger) clock.Clock
