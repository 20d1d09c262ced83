package actors

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidmq/braid/compaction"
	"github.com/braidmq/braid/internal/poll"
	"github.com/braidmq/braid/wal"
)

// countingSink counts the answers of the appends it was given.
type countingSink struct{ ok, failed atomic.Int64 }

func (s *countingSink) landed(_ unitRef, _ []int, _ uint64, err error) {
	if err != nil {
		s.failed.Add(1)
		return
	}
	s.ok.Add(1)
}
func (s *countingSink) splitInto(int) {}

// A bucket stopped with appends still in its mailbox answers every one of
// them (UNAVAILABLE, through the dead letters), instead of leaving their
// producers waiting: protoactor drops what a stopped actor's mailbox holds
// (a retired sealed segment, a deleted topic, a stopping node). Without
// lateAppends most of these appends were never answered.
func TestAStoppedBucketAnswersWhatItsMailboxHeld(t *testing.T) {
	m := newTestManager(t)
	topic := createTestTopic(t, m, "topic://t/n/stopped", 1, 1)
	pid := topic.state.Load().buckets[0][0]
	sink := &countingSink{}
	const n = 20000
	root := m.system.Root
	for i := range n {
		root.Send(pid, appendReq{records: []wal.Record{{Key: []byte{byte(i)}, Payload: []byte("x")}}, sink: sink})
		if i == n/2 {
			root.Stop(pid) // a system message: ahead of the appends queued
		}
	}
	poll.Eventually(t, 30*time.Second, "every append answered", func() bool { return sink.ok.Load()+sink.failed.Load() == n })
	if sink.failed.Load() == 0 {
		t.Fatalf("%d appends answered, none refused: the stop did not meet queued appends", sink.ok.Load())
	}
}

// A passivated topic closes the readers of its compacted logs: the next
// activation makes a Topic of its own, and the old one's readers held a
// descriptor each for as long as the process ran.
func TestPassivationClosesCompactedReaders(t *testing.T) {
	m := newTestManager(t)
	topic := createTestTopic(t, m, "topic://t/n/compactedreaders", 1, 1)
	dir := t.TempDir()
	w, err := compaction.CreateLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(0, wal.Record{Key: []byte("k"), Payload: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if r, err := topic.compactedReader(dir); err != nil || r == nil {
		t.Fatalf("reader: %v, %v", r, err)
	}
	m.ReleaseAll()
	topic.compactedMu.Lock()
	open := len(topic.compacted)
	topic.compactedMu.Unlock()
	if open != 0 {
		t.Fatalf("%d compacted readers left open by the passivated topic", open)
	}
}
