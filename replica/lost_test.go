package replica_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	c.waitDurable(old, uint64(len(got))+5)
	c.leader(old) // writes its empty entry, and nothing else
	c.setCut(old, false)
	allLost(t, stale)
	c.agree(got)
}

// waitDurable waits until replica id's log holds next records durably.
func (c *cluster) waitDurable(id, next uint64) {
	c.t.Helper()
	poll.EventuallyNil(c.t, 10*time.Second, "the replica's writes", func() error {
		c.mu.Lock()
		l := c.logs[id]
		c.mu.Unlock()
		if n := l.DurableOffset(); n < next {
			return fmt.Errorf("replica %d wrote up to %d of %d", id, n, next)
		}
		return nil
	})
}

// allLost checks that every proposal of stale is answered ErrLost.
func allLost(t *testing.T, stale []*replica.Proposal) {
	t.Helper()
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
}

// A leader whose log has a damaged frame (a flipped byte in a record,
// found when raft reads the entry back to send it to a follower that
// was away) fails alone: raft panics on a storage error, and the panic
// used to take the process, and every other group, with it. The replica
// says why (Err, the Failed counter), and the two others elect a leader
// between them and carry on with everything committed.
func TestDamagedFrameFailsItsReplicaAlone(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	c.propose(lead, 0, 5, got)
	c.agree(got)
	away := c.followers(lead)[0]
	c.halt(away)
	if lost := c.propose(lead, 100, 20, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
	damage(t, c.logDir(lead), []byte("record 110 "))
	c.start(away) // the leader reads the entries it missed from its log
	poll.EventuallyNil(t, 10*time.Second, "the leader failing on its damaged frame", func() error {
		if c.group(lead).Err() == nil {
			return fmt.Errorf("replica %d has not failed", lead)
		}
		return nil
	})
	if n := c.hosts[lead].Counters().Failed.Load(); n != 1 {
		t.Fatalf("failed replicas counted: %d, want 1", n)
	}
	c.haltExpecting(lead, true)
	next := c.leader(lead)
	if lost := c.propose(next, 200, 5, got); lost != 0 {
		t.Fatalf("%d proposals lost after the failure", lost)
	}
	c.agree(got)
}

// damage flips a byte just after the first place in dir's files that
// holds marker.
func damage(t *testing.T, dir string, marker []byte) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		if i := bytes.Index(b, marker); i >= 0 {
			f, err := os.OpenFile(name, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{b[i+len(marker)] ^ 0x20}, int64(i+len(marker))); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("%q is in no file of %s", marker, dir)
}

// A follower whose log has a damaged frame in its last file (found at
// open: a hole, with whole frames after it) opens with its log cut where
// the damage begins, shorter than what it acknowledged: raft panics on
// its leader's next heartbeat (a commit index past its log), which took
// the process down with every other group, at every start. It fails
// alone now, and says so; the others carry on. (Making its copy again
// from its peers is not built: its group goes on with two replicas.)
func TestFollowerDamagedAtRestFailsAlone(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	if lost := c.propose(lead, 0, 20, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
	c.agree(got)
	f := c.followers(lead)[0]
	c.halt(f)
	damage(t, c.logDir(f), []byte("record 10 "))
	c.start(f)
	poll.EventuallyNil(t, 10*time.Second, "the damaged follower failing", func() error {
		if c.group(f).Err() == nil {
			return fmt.Errorf("replica %d has not failed", f)
		}
		return nil
	})
	if lost := c.propose(lead, 100, 5, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
	c.haltExpecting(f, true)
	c.agree(got)
}

// A replica stopped (its topic went idle) and started again knows what
// was committed at once, cut off from the others: it serves its
// committed prefix without waiting to hear it from a leader (raft keeps a
// commit index alone in memory; it used to start from the one written
// with its last change of term or vote).
func TestStoppedReplicaKnowsItsCommitAtStart(t *testing.T) {
	c := newCluster(t, 3)
	got := acked{}
	lead := c.leader()
	if lost := c.propose(lead, 0, 10, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
	c.agree(got)
	f := c.followers(lead)[0]
	_, _, commit := c.group(f).Status()
	c.group(f).Stop()
	c.halt(f)
	c.setCut(f, true)
	c.start(f)
	if _, _, now := c.group(f).Status(); now != commit {
		t.Fatalf("started again, cut off, the replica knows commit %d, not %d", now, commit)
	}
	c.setCut(f, false)
	c.agree(got)
}
