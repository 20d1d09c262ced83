package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/braidmq/braid/api"
)

// printStats shows topic.stats as tables: the units, the segments' load,
// the subscriptions, and what the storage worker did.
func printStats(w io.Writer, st api.TopicStats) {
	fmt.Fprintf(w, "%s  epoch %d  %d messages  %d bytes", st.Topic, st.Epoch, st.Messages, st.Bytes)
	if st.TierBytes > 0 {
		fmt.Fprintf(w, " (%d in the remote tier)", st.TierBytes)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nUNIT\tSTATE\tOWNER\tFIRST\tNEXT\tBYTES\tTIER BYTES")
	for _, b := range st.Buckets {
		owner := b.Owner
		switch {
		case b.Unavailable:
			owner += " (not answering)"
		case owner == "":
			owner = "-"
		}
		fmt.Fprintf(tw, "%d/%d\t%s\t%s\t%d\t%d\t%d\t%d\n", b.Segment, b.Bucket, b.State, owner, b.FirstOffset, b.NextOffset, b.Bytes, b.TierBytes)
	}
	if len(st.Load) > 0 {
		fmt.Fprintln(tw, "\nSEGMENT\tMSG/S IN\tMSG/S OUT\tBYTES/S IN\tBYTES/S OUT\tHOTTEST KEY\tSHARE")
		for _, l := range st.Load {
			key, share := l.HotKeyLabel(), "-"
			if key == "" {
				key = "-"
			} else {
				share = fmt.Sprintf("%.0f%%", 100*l.HotKeyShare)
			}
			fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\n", l.Segment, l.MsgInRate, l.MsgOutRate, l.ByteInRate, l.ByteOutRate, key, share)
		}
	}
	subscriptionRows(tw, st.Subscriptions)
	tw.Flush()
	if s := st.Storage; s != nil {
		fmt.Fprintf(w, "\nstorage worker: %d files rolled, %d removed (%d bytes), %d head trims, %d offloaded (%d bytes), %d removed from the tier, %d errors",
			s.FilesRolled, s.FilesRemoved, s.BytesRemoved, s.HeadTrims, s.FilesOffloaded, s.BytesOffloaded, s.TierFilesRemoved, s.Errors)
		if s.LastPass != "" {
			fmt.Fprintf(w, "; last pass %s", s.LastPass)
		}
		fmt.Fprintln(w)
	}
}

// subscriptionRows writes a table of the subscriptions of topic.stats.
func subscriptionRows(tw io.Writer, subs []api.SubscriptionStats) {
	if len(subs) == 0 {
		return
	}
	fmt.Fprintln(tw, "\nSUBSCRIPTION\tKIND\tBACKLOG\tCONSUMERS\tDRAINED")
	for _, s := range subs {
		kind := s.Kind
		if kind == "" {
			kind = "stream"
		}
		if s.ReadCompacted {
			kind += " (compacted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Name, kind, s.Backlog, dash(strings.Join(s.Consumers, ",")), dash(joinIDs(s.Drained)))
	}
}

// printCompaction shows topic.compaction: the run under way, the last one
// recorded, and its horizons.
func printCompaction(w io.Writer, st api.CompactionStatus) {
	switch {
	case st.Running:
		fmt.Fprintf(w, "%s: compacting (%s), %d of %d units written, since %s\n", st.Topic, st.Phase, st.UnitsDone, st.Units, st.Started)
	case st.Error != "":
		fmt.Fprintf(w, "%s: the last compaction failed: %s\n", st.Topic, st.Error)
	default:
		fmt.Fprintf(w, "%s: no compaction running\n", st.Topic)
	}
	if st.Generation == 0 {
		fmt.Fprintln(w, "never compacted")
		return
	}
	fmt.Fprintf(w, "generation %d, finished %s: %d keys, %d of %d records kept, %d -> %d bytes, %d passes, %d ms\n",
		st.Generation, st.Finished, st.Keys, st.Kept, st.Read, st.BytesBefore, st.BytesAfter, st.Passes, st.DurationMs)
	if len(st.Horizons) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nUNIT\tHORIZON\tKEPT")
	for _, h := range st.Horizons {
		fmt.Fprintf(tw, "%d/%d\t%d\t%d\n", h.Segment, h.Bucket, h.Horizon, h.Kept)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func joinIDs(ids []uint64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return strings.Join(parts, ",")
}
