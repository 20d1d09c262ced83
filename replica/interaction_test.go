package replica

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/rafttest"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/crashfs"
)

// etcd raft's own interaction tests (the scripts in its testdata: elections,
// pre-vote, check quorum, forgetting a leader, asynchronous storage writes,
// probing, paused replication, configuration changes), run with Braid's
// storage under every node in place of raft's MemoryStorage: each node's
// entries go to a version 3 log and its hard state and marks to a state
// journal, on the crash file system. Every script must give raft's own
// expected output, byte for byte; and after each of its commands, what a
// power loss would leave of every node (the file system's durable copy,
// opened afresh) must be the node's storage as raft sees it: the same
// entries, terms and data, term and vote, and configuration.
//
// Not run: the scripts that set raft's randomized election timeout (a hook
// of raft's own tests), and those that install a snapshot over a log or
// compact one — a Braid group never does either: a replica is copied file
// by file, and an active group's membership changes by sealing it.

// skippedInteractions names the scripts not run, with why.
var skippedInteractions = map[string]string{
	"forget_leader.txt":                        "sets the randomized election timeout (raft's own test hook)",
	"prevote_checkquorum.txt":                  "sets the randomized election timeout (raft's own test hook)",
	"slow_follower_after_compaction.txt":       "compacts a log (Braid drops a log's head with its segment, not by raft)",
	"snapshot_succeed_via_app_resp.txt":        "installs a snapshot over a log (Braid copies a replica's files)",
	"snapshot_succeed_via_app_resp_behind.txt": "installs a snapshot over a log (Braid copies a replica's files)",
}

func TestRaftInteractionsOverBraidStorage(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.etcd.io/raft/v3").Output()
	if err != nil {
		t.Fatalf("finding etcd raft's module (for its testdata): %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "testdata")
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) < 20 {
		t.Fatalf("etcd raft's interaction scripts in %s: %d found (%v)", dir, len(files), err)
	}
	ran := 0
	for _, path := range files {
		name := filepath.Base(path)
		if why, ok := skippedInteractions[name]; ok {
			t.Logf("%s not run: %s", name, why)
			continue
		}
		ran++
		t.Run(strings.TrimSuffix(name, ".txt"), func(t *testing.T) {
			h := newInteractionHarness(t)
			defer h.close()
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				out := h.env.Handle(t, *d)
				h.adopt(t)
				h.checkDurable(t, d.Pos)
				return out
			})
		})
	}
	if ran < 20 {
		t.Fatalf("only %d scripts ran", ran)
	}
}

// interactionHarness runs one script: an InteractionEnv whose nodes store
// into Braid's storage on one crash file system.
type interactionHarness struct {
	env   *rafttest.InteractionEnv
	fs    *crashfs.Mem
	nodes map[uint64]*braidNodeStorage
}

func newInteractionHarness(t *testing.T) *interactionHarness {
	h := &interactionHarness{fs: crashfs.NewMem(), nodes: map[uint64]*braidNodeStorage{}}
	h.env = rafttest.NewInteractionEnv(&rafttest.InteractionOpts{
		OnConfig: func(cfg *raft.Config) {
			s, err := h.open(cfg.ID, cfg.Storage)
			if err != nil {
				t.Fatalf("node %d: %v", cfg.ID, err)
			}
			cfg.Storage = s
		},
	})
	return h
}

// open makes node id's storage, starting where mem starts (the snapshot
// the script bootstraps it with, if any).
func (h *interactionHarness) open(id uint64, mem raft.Storage) (*braidNodeStorage, error) {
	root := fmt.Sprintf("/n%d", id)
	_, cs, err := mem.InitialState()
	if err != nil {
		return nil, err
	}
	first, err := mem.FirstIndex()
	if err != nil {
		return nil, err
	}
	snapTerm, err := mem.Term(first - 1)
	if err != nil {
		return nil, err
	}
	voters := cs.GetVoters()
	if len(voters) == 0 {
		voters = []uint64{id} // a node pulled out of thin air; its snapshot names the others
	}
	if err := Bootstrap(h.fs, root+"/raft.state", voters); err != nil {
		return nil, err
	}
	n := &braidNodeStorage{h: h, id: id, root: root}
	if err := n.openOn(h.fs); err != nil {
		return nil, err
	}
	if first > 1 {
		if err := n.applySnapshot(first-1, snapTerm, cs); err != nil {
			return nil, err
		}
	} else if len(cs.GetVoters()) == 0 {
		if err := n.applySnapshot(0, 0, cs); err != nil {
			return nil, err
		}
	}
	h.nodes[id] = n
	return n, nil
}

// adopt puts each node's Braid storage where the environment writes
// (it made a MemoryStorage of its own for each node it added).
func (h *interactionHarness) adopt(t *testing.T) {
	for i := range h.env.Nodes {
		n := &h.env.Nodes[i]
		s, ok := h.nodes[n.Config.ID]
		if !ok {
			t.Fatalf("node %d has no Braid storage", n.Config.ID)
		}
		n.Storage = s
	}
}

// checkDurable opens what a crash now would leave of every node and
// compares it with the node's storage.
func (h *interactionHarness) checkDurable(t *testing.T, pos string) {
	t.Helper()
	fork := h.fs.Durable()
	for id, n := range h.nodes {
		again := &braidNodeStorage{h: h, id: id, root: n.root}
		if err := again.openOn(fork); err != nil {
			t.Fatalf("%s: node %d after a crash here: %v", pos, id, err)
		}
		if diff := sameStorage(n.Storage, again.Storage); diff != "" {
			t.Errorf("%s: node %d after a crash here differs from what raft was told is stored: %s", pos, id, diff)
		}
		again.close()
	}
}

// sameStorage compares what raft reads of two storages ("" when alike;
// the durable one's commit index may be behind).
func sameStorage(live, durable *Storage) string {
	lhs, lcs, _ := live.InitialState()
	dhs, dcs, _ := durable.InitialState()
	if lhs.GetTerm() != dhs.GetTerm() || lhs.GetVote() != dhs.GetVote() || dhs.GetCommit() > lhs.GetCommit() {
		return fmt.Sprintf("hard state %v, durable %v", lhs, dhs)
	}
	if !slices.Equal(lcs.GetVoters(), dcs.GetVoters()) || !slices.Equal(lcs.GetLearners(), dcs.GetLearners()) {
		return fmt.Sprintf("configuration %v, durable %v", lcs, dcs)
	}
	lf, _ := live.FirstIndex()
	df, _ := durable.FirstIndex()
	ll, _ := live.LastIndex()
	dl, _ := durable.LastIndex()
	if lf != df || ll != dl {
		return fmt.Sprintf("entries [%d, %d], durable [%d, %d]", lf, ll, df, dl)
	}
	lt, _ := live.Term(lf - 1)
	if dt, _ := durable.Term(df - 1); dt != lt {
		return fmt.Sprintf("term %d before the first entry, durable %d", lt, dt)
	}
	if ll < lf {
		return ""
	}
	le, err := live.Entries(lf, ll+1, 1<<62)
	if err != nil {
		return err.Error()
	}
	de, err := durable.Entries(df, dl+1, 1<<62)
	if err != nil {
		return "durable: " + err.Error()
	}
	for i := range le {
		if !proto.Equal(le[i], de[i]) {
			return fmt.Sprintf("entry %v, durable %v", le[i], de[i])
		}
	}
	return ""
}

func (h *interactionHarness) close() {
	for _, n := range h.nodes {
		n.close()
	}
}

// braidNodeStorage is a node's Braid storage as the interaction
// environment uses it: raft's storage, plus the writes of its Ready
// handling, each made durable before it returns (as a host's round does
// before it lets raft go on).
type braidNodeStorage struct {
	*Storage
	h       *interactionHarness
	id      uint64
	root    string
	log     *wal.Log
	journal *StateJournal
}

var _ rafttest.Storage = (*braidNodeStorage)(nil)

func (n *braidNodeStorage) openOn(fsys wal.FS) error {
	j, err := OpenStateJournal(n.root+"/raft-journal", n.root, fsys, 4096)
	if err != nil {
		return err
	}
	l, err := wal.Open(n.root+"/log", wal.Options{Durability: wal.DurabilityAlways, FS: fsys})
	if err != nil {
		j.Close()
		return err
	}
	st, err := OpenStorageIn(j, l, fsys, n.root+"/raft.state")
	if err != nil {
		l.Close()
		j.Close()
		return err
	}
	n.Storage, n.log, n.journal = st, l, j
	return nil
}

func (n *braidNodeStorage) close() {
	n.log.Close()
	n.journal.Close()
}

// applySnapshot starts an empty node at a snapshot: the entry before its
// log and its configuration. A Braid replica never takes one over a log.
func (n *braidNodeStorage) applySnapshot(index, term uint64, cs *pb.ConfState) error {
	s := n.Storage
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.slots) > 0 || s.st.snapIndex > 0 {
		return fmt.Errorf("node %d: a snapshot at %d over a log of %d entries", n.id, index, s.lastLocked())
	}
	s.st.snapIndex, s.st.snapTerm = index, term
	s.st.voters, s.st.learners = slices.Clone(cs.GetVoters()), slices.Clone(cs.GetLearners())
	if err := s.writeStateLocked(); err != nil {
		return err
	}
	return s.syncStateLocked()
}

// Entries gives raft back the entries' data as it proposed it (the
// storage keeps a proposal's data as records).
func (n *braidNodeStorage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	ents, err := n.Storage.Entries(lo, hi, maxSize)
	if err != nil {
		return nil, err
	}
	for k, e := range ents {
		if !carriesRecords(e) {
			continue
		}
		recs, err := wal.DecodeEntryData(e.Data)
		if err != nil || len(recs) != 1 {
			return nil, fmt.Errorf("node %d entry %d: %d records, %v", n.id, e.GetIndex(), len(recs), err)
		}
		c := proto.Clone(e).(*pb.Entry)
		c.Data = recs[0].Payload
		ents[k] = c
	}
	return ents, nil
}

// Snapshot is the environment's latest snapshot of the node, as raft's own
// harness gives it (Braid sends none).
func (n *braidNodeStorage) Snapshot() (*pb.Snapshot, error) {
	for i := range n.h.env.Nodes {
		if nd := &n.h.env.Nodes[i]; nd.Config.ID == n.id {
			return nd.History[len(nd.History)-1], nil
		}
	}
	return nil, raft.ErrSnapshotTemporarilyUnavailable
}

// Append stores ents, a proposal's data as one record, and makes them
// durable.
func (n *braidNodeStorage) Append(ents []*pb.Entry) error {
	wrapped := make([]*pb.Entry, len(ents))
	for k, e := range ents {
		wrapped[k] = e
		if carriesRecords(e) {
			c := proto.Clone(e).(*pb.Entry)
			c.Data = wal.EncodeEntryData(nil, []wal.Record{{Payload: e.Data}})
			wrapped[k] = c
		}
	}
	if err := n.Storage.Append(wrapped); err != nil {
		return err
	}
	if err := n.journal.Sync(); err != nil {
		return err
	}
	return n.Storage.Commit()
}

// SetHardState stores hs durably.
func (n *braidNodeStorage) SetHardState(hs *pb.HardState) error {
	if err := n.Storage.SetHardState(hs); err != nil {
		return err
	}
	return n.journal.Sync()
}

// ApplySnapshot starts a node pulled out of thin air at the snapshot its
// leader sends.
func (n *braidNodeStorage) ApplySnapshot(snap *pb.Snapshot) error {
	md := snap.GetMetadata()
	return n.applySnapshot(md.GetIndex(), md.GetTerm(), md.GetConfState())
}

// Compact is not a Braid group's: its log's head goes with its segment.
func (n *braidNodeStorage) Compact(uint64) error {
	return fmt.Errorf("node %d: Braid's raft storage does not compact", n.id)
}
