package replica_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
)

// A leader cut off with proposals in its log loses them all when the
// others elect another leader that writes nothing but its election's
// empty entry: the old leader's suffix is cut from that entry on, and
// every proposal in it is answered lost, not only the one whose index
// the new entry took (the others used to wait for entries at their
// indexes, which an idle group never writes).
func TestDeposedLeadersProposalsLostPastAShortLog(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	old := c.leader()
	c.propose(old, 0, 5, got)
	c.agree(got)
	c.setCut(old, true)
	var stale []*replica.Proposal
	for i := range 5 {
		stale = append(stale, c.group(old).Propose([]wal.Record{rec(500 + i)}))
	}
	poll.EventuallyNil(t, 10*time.Second, "the cut-off leader's writes", func() error {
		c.mu.Lock()
		l := c.logs[old]
		c.mu.Unlock()
		if n := l.DurableOffset(); n < uint64(len(got))+5 {
			return fmt.Errorf("the cut-off leader wrote up to %d", n)
		}
		return nil
	})
	c.leader(old) // writes its empty entry, and nothing else
	c.setCut(old, false)
	for i, p := range stale {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("stale proposal %d of %d not answered", i, len(stale))
		}
		if !errors.Is(p.Err, replica.ErrLost) {
			t.Fatalf("stale proposal %d: %v, want ErrLost", i, p.Err)
		}
	}
	c.agree(got)
}
