package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
)

// compactCmd starts a compaction of uri and follows it with a progress bar
// (units written of units) until it ends, then prints what it did (as JSON
// with asJSON).
func compactCmd(ctx context.Context, adm *client.Admin, uri string, asJSON bool) error {
	st, err := adm.Compact(ctx, uri)
	if err != nil {
		return err
	}
	tty := isTerminal(os.Stderr)
	for st.Running {
		progressBar(st, tty)
		time.Sleep(100 * time.Millisecond) // the CLI polls the server's status
		if st, err = adm.Compaction(ctx, uri); err != nil {
			return err
		}
	}
	if tty {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if st.Error != "" {
		return fmt.Errorf("compaction of %s failed: %s", uri, st.Error)
	}
	if asJSON {
		return printJSON(os.Stdout, st)
	}
	fmt.Printf("compacted %s: generation %d, %d keys, %d of %d records kept, %d -> %d bytes, %d passes, %d ms\n",
		uri, st.Generation, st.Keys, st.Kept, st.Read, st.BytesBefore, st.BytesAfter, st.Passes, st.DurationMs)
	return nil
}

// progressBar draws the compaction's progress on stderr: in place on a
// terminal, a line per change elsewhere.
func progressBar(st api.CompactionStatus, tty bool) {
	const width = 30
	done := 0
	if st.Units > 0 {
		done = st.UnitsDone * width / st.Units
	}
	line := fmt.Sprintf("%-8s [%s%s] %d/%d units", st.Phase, strings.Repeat("#", done), strings.Repeat(".", width-done), st.UnitsDone, st.Units)
	if tty {
		fmt.Fprint(os.Stderr, "\r\033[K"+line)
		return
	}
	fmt.Fprintln(os.Stderr, line)
}

func isTerminal(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
