package replica_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/replica"
	"github.com/braidmq/braid/wal"
)

// Seals and leads taken instead of another replica.

// A sealed group takes no more records: proposals after the seal are
// refused, every replica's committed prefix ends at the seal, and so it
// does after a restart and on the replica that leads next.
func TestGroupSeal(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	c.propose(lead, 0, 10, got)
	// Proposals racing the seal: each is either stored before it or
	// refused after it.
	var racing []*replica.Proposal
	for i := range 5 {
		racing = append(racing, c.group(lead).Propose([]wal.Record{rec(100 + i)}))
	}
	if err := c.group(lead).Seal().Wait(); err != nil {
		t.Fatalf("seal: %v", err)
	}
	for i := range 5 {
		racing = append(racing, c.group(lead).Propose([]wal.Record{rec(200 + i)}))
	}
	for i, p := range racing {
		if err := p.Wait(); err == nil {
			got[p.First] = rec(100 + i)
			if i >= 5 {
				t.Fatalf("a proposal made after the seal was committed at %d", p.First)
			}
		} else if !errors.Is(err, replica.ErrSealed) {
			t.Fatalf("proposal %d: %v", i, err)
		}
	}
	end, ok := c.group(lead).Sealed()
	if !ok || end != uint64(len(got)) {
		t.Fatalf("sealed at %d (%v), want the %d records committed", end, ok, len(got))
	}
	c.agree(got)
	for _, id := range c.ids {
		poll.EventuallyNil(t, 10*time.Second, "the seal on every replica", func() error {
			if e, ok := c.group(id).Sealed(); !ok || e != end {
				return fmt.Errorf("replica %d: sealed %v at %d", id, ok, e)
			}
			return nil
		})
	}
	// Every replica hears of the seal once.
	for _, id := range c.ids {
		poll.EventuallyNil(t, 10*time.Second, "every replica hearing of the seal", func() error {
			if n := c.sealed[id].Load(); n != 1 {
				return fmt.Errorf("replica %d heard of the seal %d times", id, n)
			}
			return nil
		})
	}
	// After the leader's loss and a restart of all, the seal holds (and is
	// not heard of again: it was known at the start).
	c.halt(lead)
	next := c.leader(lead)
	if err := c.group(next).Propose([]wal.Record{rec(300)}).Wait(); !errors.Is(err, replica.ErrSealed) {
		t.Fatalf("a proposal to the next leader: %v, want ErrSealed", err)
	}
	c.start(lead)
	for _, id := range c.ids {
		c.halt(id)
	}
	for _, id := range c.ids {
		c.start(id)
		if e, ok := c.group(id).Sealed(); !ok || e != end {
			t.Fatalf("replica %d after a restart: sealed %v at %d, want %d", id, ok, e, end)
		}
	}
	c.agree(got)
	for _, id := range c.ids {
		if n := c.sealed[id].Load(); n != 1 {
			t.Fatalf("replica %d heard of the seal %d times after restarts", id, n)
		}
	}
}

// A replica told to take the lead instead of one taken for down does
// not take it while that one leads and speaks: it is not handed over (a
// leader hands the lead to whoever asks), and LeadInstead fails with
// ErrLeaderAlive, the lead where it was. A node with a stale view of
// another (it missed its messages across a partition that healed) took
// the topics of a live home this way. Once the leader is gone, it takes
// the lead.
func TestLeadInsteadOfALiveLeader(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.leader()
	f := c.followers(lead)[0]
	if err := c.group(f).LeadInstead(5*time.Second, lead); !errors.Is(err, replica.ErrLeaderAlive) {
		t.Fatalf("LeadInstead of the live leader %d: %v, want ErrLeaderAlive", lead, err)
	}
	if now := c.leader(); now != lead {
		t.Fatalf("the lead moved from the live %d to %d", lead, now)
	}
	// Lead, which hands over from whoever leads, takes it.
	if err := c.group(f).Lead(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if now := c.leader(); now != f {
		t.Fatalf("Lead: the leader is %d, want %d", now, f)
	}
	c.halt(f)
	o := c.followers(f)[0]
	if o == lead {
		o = c.followers(f)[1]
	}
	if err := c.group(o).LeadInstead(10*time.Second, f); err != nil {
		t.Fatalf("LeadInstead of the stopped %d: %v", f, err)
	}
}

// A leader whose messages stop reaching the others (one way: it still
// hears them) while it goes on proposing: the others take the lead
// instead of it and seal the group. Once its messages flow again, every
// replica's sealed end is the same and holds every acknowledged record —
// the old leader's too, whatever it had appended that never committed.
func TestSealedByTheOthersUnderAOneWayCut(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	c.propose(lead, 0, 30, got)
	var cut atomic.Bool
	cut.Store(true)
	c.mu.Lock()
	c.drop = func(from, _ uint64, _ *pb.Message) bool { return cut.Load() && from == lead }
	c.mu.Unlock()
	// Proposals the cut-off leader takes: they never commit.
	var stray []*replica.Proposal
	for i := range 20 {
		stray = append(stray, c.group(lead).Propose([]wal.Record{rec(10_000 + i)}))
	}
	next := c.followers(lead)[0]
	poll.EventuallyNil(t, 20*time.Second, "the others taking the lead", func() error {
		return c.group(next).LeadInstead(time.Second, lead)
	})
	seal := c.group(next).Seal()
	select {
	case <-seal.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the seal was not committed")
	}
	if seal.Err != nil {
		t.Fatal(seal.Err)
	}
	cut.Store(false)
	want := uint64(len(got))
	poll.EventuallyNil(t, 20*time.Second, "every replica sealed at the same end", func() error {
		for _, id := range c.ids {
			end, ok := c.group(id).Sealed()
			if !ok || end != want {
				return fmt.Errorf("replica %d: sealed %v at %d, want %d", id, ok, end, want)
			}
		}
		return nil
	})
	for i, p := range stray {
		select {
		case <-p.Done():
			if p.Err == nil {
				t.Fatalf("a proposal of the cut-off leader was answered committed at [%d, %d)", p.First, p.Next)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the cut-off leader's proposal %d was never answered", i)
		}
	}
	c.agree(got)
}
