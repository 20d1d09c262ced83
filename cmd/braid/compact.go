package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/braidmq/braid/client"
)

// compactCmd starts a compaction of uri and follows it with a progress bar
// (units written of units) until it ends, then prints what it did (as JSON
// with asJSON).
func compactCmd(ctx context.Context, adm *client.Admin, uri string, asJSON bool, stdout, stderr io.Writer) error {
	st, err := adm.Compact(ctx, uri)
	if err != nil {
		return err
	}
	bar := newProgress(stderr, "compact", int64(st.Units))
	for st.Running {
		bar.describe(st.Phase)
		bar.set(int64(st.UnitsDone))
		time.Sleep(100 * time.Millisecond) // the CLI polls the server's status
		if st, err = adm.Compaction(ctx, uri); err != nil {
			return err
		}
	}
	bar.finish(int64(st.UnitsDone))
	if st.Error != "" {
		return fmt.Errorf("compaction of %s failed: %s", uri, st.Error)
	}
	if asJSON {
		return printJSON(stdout, st)
	}
	fmt.Fprintf(stdout, "compacted %s: generation %d, %d keys, %d of %d records kept, %d -> %d bytes, %d passes, %d ms\n",
		uri, st.Generation, st.Keys, st.Kept, st.Read, st.BytesBefore, st.BytesAfter, st.Passes, st.DurationMs)
	return nil
}
