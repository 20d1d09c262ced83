package replica_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

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
	// Told once, for its copy to be made again from its peers.
	if n := c.failed[lead].Load(); n != 1 {
		t.Fatalf("OnFailed called %d times, want 1", n)
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
// open: a hole, with whole frames after it) lost entries it had
// acknowledged: its storage refuses to open, and leaves its log as it
// is; the group goes on with the other two. (It used to open with its
// log cut where the damage begins, shorter than what it acknowledged:
// raft panicked on its leader's next heartbeat, which took the process
// down with every other group, at every start; then it failed alone.
// Making its copy again from its peers is not built.)
func TestFollowerDamagedAtRestIsRefused(t *testing.T) {
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
	l, err := wal.Open(c.logDir(f), wal.Options{Durability: wal.DurabilityAlways})
	if err != nil {
		t.Fatal(err)
	}
	next := l.NextOffset()
	if _, err := replica.OpenStorage(l, nil, c.statePath(f)); !errors.Is(err, replica.ErrDamaged) {
		t.Fatalf("the damaged follower's storage opened: %v, want ErrDamaged", err)
	}
	if l.NextOffset() != next {
		t.Fatalf("the refused log ends at %d, not %d: it was cut", l.NextOffset(), next)
	}
	l.Close()
	if lost := c.propose(lead, 100, 5, got); lost != 0 {
		t.Fatalf("%d proposals lost", lost)
	}
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

// A copy whose older file lost its last frames (a file truncated, a
// sector gone) is refused at open: the frames after the hole stay where
// they are. It used to take them for what a crash leaves past a gap and
// cut them, and the entries its leader sent again were written at other
// offsets than the other replicas hold them at (found by the fault
// suite: readers read 58 records twice, out of order).
func TestStorageRefusesALogThatLostEntries(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := replica.Bootstrap(nil, state, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(filepath.Join(dir, "log"), wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	st, err := replica.OpenStorage(l, nil, state)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 40; i++ {
		if err := st.Append([]*pb.Entry{entry(1, i, rec(int(i)), rec(int(i)+1000))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
	next := l.NextOffset()
	l.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "log", "[0-9]*"))
	if len(files) < 3 {
		t.Fatalf("%d log files, want 3 or more", len(files))
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(files[0], int64(len(b)-10)); err != nil { // into its last frame
		t.Fatal(err)
	}
	l, err = wal.Open(filepath.Join(dir, "log"), wal.Options{Durability: wal.DurabilityAlways, SegmentBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := replica.OpenStorage(l, nil, state); !errors.Is(err, replica.ErrDamaged) {
		t.Fatalf("open over a log that lost entries: %v, want ErrDamaged", err)
	}
	if l.NextOffset() != next {
		t.Fatalf("the refused log ends at %d, not %d: it was cut", l.NextOffset(), next)
	}
	if recs, err := l.ReadRange(next-2, 2, 0); err != nil || len(recs) != 2 {
		t.Fatalf("the records after the hole: %d, %v", len(recs), err)
	}
}

// A leader whose disk fails (EIO on fsync) fails alone, answers every
// proposal it holds (their outcome is its producers' to learn: the
// others may have committed them) and refuses new ones at once: before,
// they waited for an answer that never came, and a topic stopping over
// them waited out its timeouts. It is told once (OnFailed, for its copy
// to be made again), and the others carry on.
func TestALeaderWhoseDiskFailsAnswersItsProposals(t *testing.T) {
	c := newClusterWith(t, 3, clusterOptions{faulty: true})
	got := acked{}
	lead := c.leader()
	c.propose(lead, 0, 5, got)
	c.agree(got)
	c.failingSync[lead].Store(true)
	c.propose(lead, 100, 20, got) // answered, committed or not: propose fails on no answer
	poll.EventuallyNil(t, 10*time.Second, "the leader failing on its disk", func() error {
		if c.group(lead).Err() == nil {
			return fmt.Errorf("replica %d has not failed", lead)
		}
		return nil
	})
	if n := c.failed[lead].Load(); n != 1 {
		t.Fatalf("OnFailed called %d times, want 1", n)
	}
	p := c.group(lead).Propose([]wal.Record{rec(500)})
	select {
	case <-p.Done():
		if p.Err == nil {
			t.Fatal("a failed replica took a proposal")
		}
	default:
		t.Fatal("a failed replica's proposal was not refused at once")
	}
	c.haltExpecting(lead, true)
	next := c.leader(lead)
	if lost := c.propose(next, 600, 5, got); lost != 0 {
		t.Fatalf("%d proposals lost after the failure", lost)
	}
}
