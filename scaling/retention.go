package scaling

import (
	"time"

	"github.com/braidmq/braid/topology"
)

// Expired returns, ascending, the sealed segments of l that retention may
// delete at now: sealed at least retention ago (sealedAt says when; a
// segment it does not know is kept) and drained by every subscription in
// drainedBy. A negative retention keeps every sealed segment. Deleted and
// active segments are never returned.
//
// Only subscriptions hold segments back: checkpoint consumers keep their
// positions themselves, and retention is their contract.
func Expired(l topology.Layout, sealedAt func(topology.SegmentID) (time.Time, bool), retention time.Duration,
	drainedBy []func(topology.SegmentID) bool, now time.Time) []topology.SegmentID {
	if retention < 0 {
		return nil
	}
	var out []topology.SegmentID
	for _, s := range l.Segments {
		if s.State != topology.StateSealed {
			continue
		}
		at, ok := sealedAt(s.ID)
		if !ok || now.Sub(at) < retention {
			continue
		}
		drained := true
		for _, d := range drainedBy {
			if !d(s.ID) {
				drained = false
				break
			}
		}
		if drained {
			out = append(out, s.ID)
		}
	}
	return out
}
