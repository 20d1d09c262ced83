package replica

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/braidmq/braid/wal"
)

// Storage is etcd raft's storage of one group, over the unit's log: the
// log is the raft log. An entry that carries records (a proposal: its data
// made by wal.EncodeEntryData) is one version 3 frame of the log, at the
// next offsets; an entry that carries none is a mark in the state file.
// Offsets stay dense, and are the same on every replica, as they follow
// from the entries.
//
// Storage is safe for concurrent use; raft reads it from the group's
// goroutine while the append goroutine writes.
type Storage struct {
	log  *wal.Log
	fsys wal.FS
	path string // the state file

	mu    sync.Mutex
	st    state
	slots []slot // entries (st.snapIndex, last]: slots[i] is index st.snapIndex+1+i
	// stored is what the state file holds of the hard state, to tell
	// which changes must reach it before raft may go on.
	stored struct{ term, vote, commit uint64 }
	// journal, when set, takes the state's changes (rel names the state
	// file in it); staged is the position of the last one.
	journal *StateJournal
	rel     string
	staged  uint64
	// marksAt is the position of marks staged and maybe not durable yet
	// (0: none).
	marksAt uint64
}

// slot is one entry of the log: its term and, for an entry that carries
// records, their offsets (count 0 for a mark).
type slot struct {
	term  uint64
	first uint64
	count uint64
}

// Bootstrap makes the state of a new group with voters (raft replica ids)
// at path; the group's log must be empty. It fails if path exists.
func Bootstrap(fsys wal.FS, path string, voters []uint64) error {
	if _, found, err := readState(fsys, path); err != nil || found {
		if err == nil {
			err = fmt.Errorf("braid/replica: %s exists: the group is made", path)
		}
		return err
	}
	if len(voters) == 0 || slices.Contains(voters, 0) {
		return fmt.Errorf("braid/replica: voters %v: at least one, none 0", voters)
	}
	if fsys == nil {
		fsys = wal.OSFS
	}
	if err := wal.MkdirDurable(fsys, filepath.Dir(path)); err != nil {
		return err
	}
	s := state{voters: slices.Clone(voters), instance: newInstance()}
	return wal.ReplaceFile(fsys, path, s.encode())
}

// OpenStorage opens the storage of a group: its log (open, of version 3
// frames) and its state file at path (made by Bootstrap). It rebuilds the
// entries from the log's frame headers and the marks, and cuts what a
// crash left after a gap or a fall in term (never a durable entry: raft
// appends in order).
func OpenStorage(log *wal.Log, fsys wal.FS, path string) (*Storage, error) {
	return OpenStorageIn(nil, log, fsys, path)
}

// OpenStorageIn is OpenStorage with the state's changes going to the
// host's state journal j (none if nil): the group's state is the journal's
// latest record of it when that is of the file's instance and newer.
func OpenStorageIn(j *StateJournal, log *wal.Log, fsys wal.FS, path string) (*Storage, error) {
	// The journal's record is taken before the file is read: a checkpoint
	// writes the file before it forgets the record, so one of the two has
	// the latest state.
	var rel string
	var rec []byte
	if j != nil {
		var err error
		if rel, err = j.rel(path); err != nil {
			return nil, err
		}
		rec = j.latest(rel)
	}
	st, found, err := readState(fsys, path)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("braid/replica: no state file %s: the group was never made here", path)
	}
	if j != nil {
		if st.instance == 0 {
			// A state file of version 1: given an instance (durably) before
			// any of its changes goes to the journal.
			st.instance = newInstance()
			if err := wal.ReplaceFile(fsys, path, st.encode()); err != nil {
				return nil, fmt.Errorf("braid/replica: writing %s: %w", path, err)
			}
		}
		if rec != nil {
			if js, err := decodeState(rec); err == nil && js.instance == st.instance && js.seq > st.seq {
				st = js
			}
		}
	}
	refs, err := log.Entries(0)
	if err != nil {
		return nil, err
	}
	s := &Storage{log: log, fsys: fsys, path: path, st: st, journal: j, rel: rel}
	s.stored.term, s.stored.vote, s.stored.commit = st.term, st.vote, st.commit
	// Merge the frames and the marks by index, from the compaction point.
	index, term := st.snapIndex, st.snapTerm
	r, m := 0, 0
	for r < len(refs) && refs[r].Index <= index {
		r++
	}
	for m < len(st.marks) && st.marks[m].index <= index {
		m++
	}
	keptMarks := st.marks[:m]
	for {
		switch {
		case r < len(refs) && refs[r].Index == index+1 && refs[r].Term >= term:
			s.slots = append(s.slots, slot{term: refs[r].Term, first: refs[r].First, count: refs[r].Count})
			term = refs[r].Term
			r++
		case m < len(st.marks) && st.marks[m].index == index+1 && st.marks[m].term >= term:
			s.slots = append(s.slots, slot{term: st.marks[m].term})
			keptMarks = append(keptMarks, st.marks[m])
			term = st.marks[m].term
			m++
		default:
			goto merged
		}
		index++
	}
merged:
	if r == 0 && len(refs) > 0 && refs[0].Index > index+1 {
		// Not what a crash leaves (see Append): the log's head was dropped
		// without a compaction point. Refuse rather than cut.
		return nil, fmt.Errorf("braid/replica: the log %s starts at entry %d; its entries end at %d", log.Dir(), refs[0].Index, index)
	}
	if r < len(refs) {
		want := log.FirstOffset() // where the frame after the gap would start
		if r > 0 {
			want = refs[r-1].Next()
		}
		if refs[r].First != want {
			// Records are missing before it: not what a crash leaves (a
			// cut runs the log's offsets on where it cut) but a hole,
			// damage that lost entries this copy had stored. Cutting the
			// frames past it would write what comes again at other
			// offsets than the other replicas have them: refused.
			return nil, fmt.Errorf("%w: the log %s lost entries %d to %d (records [%d, %d)) to damage",
				ErrDamaged, log.Dir(), index+1, refs[r].Index-1, want, refs[r].First)
		}
		// Frames past a gap: a crash between a cut and the state file, or
		// before a mark reached it. They were never acknowledged.
		if err := log.TruncateTail(refs[r].First); err != nil {
			return nil, fmt.Errorf("braid/replica: cutting entries from %d past the log's end %d: %w", refs[r].Index, index, err)
		}
	}
	if m < len(st.marks) {
		s.st.marks = keptMarks
		if err := s.writeStateLocked(); err != nil {
			return nil, err
		}
		if err := s.syncStateLocked(); err != nil {
			return nil, err
		}
	}
	s.st.commit = min(s.st.commit, s.lastLocked())
	return s, nil
}

// Log returns the log the storage writes.
func (s *Storage) Log() *wal.Log { return s.log }

func (s *Storage) lastLocked() uint64 { return s.st.snapIndex + uint64(len(s.slots)) }

// slotLocked returns the slot of index i, in (snapIndex, last].
func (s *Storage) slotLocked(i uint64) slot { return s.slots[i-s.st.snapIndex-1] }

// InitialState implements raft.Storage.
func (s *Storage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := &pb.HardState{Term: proto.Uint64(s.st.term), Vote: proto.Uint64(s.st.vote), Commit: proto.Uint64(s.st.commit)}
	cs := &pb.ConfState{Voters: slices.Clone(s.st.voters), Learners: slices.Clone(s.st.learners)}
	return hs, cs, nil
}

// Entries implements raft.Storage: the entries [lo, hi), at least one,
// within maxSize bytes of data. Entries that carry records are read back
// from the log.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lo <= s.st.snapIndex {
		return nil, raft.ErrCompacted
	}
	if hi > s.lastLocked()+1 || lo > hi {
		return nil, raft.ErrUnavailable
	}
	var out []*pb.Entry
	var size uint64
	for i := lo; i < hi; i++ {
		sl := s.slotLocked(i)
		e := &pb.Entry{Term: proto.Uint64(sl.term), Index: proto.Uint64(i), Type: pb.EntryNormal.Enum()}
		if sl.count == 0 {
			k, _ := slices.BinarySearchFunc(s.st.marks, i, func(m mark, i uint64) int { return cmpU(m.index, i) })
			mk := s.st.marks[k]
			e.Type, e.Data = mk.typ.Enum(), mk.data
		} else {
			recs, err := s.log.ReadRangeDurable(sl.first, int(sl.count), 1<<62)
			if err != nil {
				return nil, fmt.Errorf("braid/replica: entry %d, offsets [%d, %d): %w", i, sl.first, sl.first+sl.count, err)
			}
			if uint64(len(recs)) != sl.count {
				return nil, fmt.Errorf("braid/replica: entry %d: read %d of its %d records", i, len(recs), sl.count)
			}
			e.Data = wal.EncodeEntryData(nil, recs)
		}
		size += uint64(len(e.Data)) + 16
		if len(out) > 0 && size > maxSize {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Term implements raft.Storage.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case i < s.st.snapIndex:
		return 0, raft.ErrCompacted
	case i == s.st.snapIndex:
		return s.st.snapTerm, nil
	case i > s.lastLocked():
		return 0, raft.ErrUnavailable
	}
	return s.slotLocked(i).term, nil
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastLocked(), nil
}

// FirstIndex implements raft.Storage.
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.snapIndex + 1, nil
}

// Snapshot implements raft.Storage. A group's snapshot is its log: a
// replica that needs entries before the compaction point is given a copy
// of the log, which is not built yet.
func (s *Storage) Snapshot() (*pb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.snapIndex > 0 {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index: proto.Uint64(0), Term: proto.Uint64(0),
		ConfState: &pb.ConfState{Voters: slices.Clone(s.st.voters), Learners: slices.Clone(s.st.learners)},
	}}, nil
}

// Offsets returns the offsets [first, next) of the records of entries up
// to index i (the log's first offset to the end of i's records): what a
// replica whose commit index is i may serve.
func (s *Storage) Offsets(i uint64) (next uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i = min(i, s.lastLocked())
	for ; i > s.st.snapIndex; i-- {
		if sl := s.slotLocked(i); sl.count > 0 {
			return sl.first + sl.count
		}
	}
	return s.log.FirstOffset()
}

// EntryAt returns the offsets of entry i's records (count 0 for a mark).
func (s *Storage) EntryAt(i uint64) (first, count uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i <= s.st.snapIndex || i > s.lastLocked() {
		return 0, 0, false
	}
	sl := s.slotLocked(i)
	return sl.first, sl.count, true
}

// ErrDamaged is returned by OpenStorage for a log that lost entries it
// had stored (a hole in a file, passed over by its frames' index): the
// copy cannot rejoin its group as the same member, and its log is left as
// it is (its other records still read, and the hole says what it lost).
var ErrDamaged = errors.New("braid/replica: the copy lost entries it had stored")

// ErrGap is returned by Append for entries that do not follow the log.
var ErrGap = errors.New("braid/replica: entries do not follow the log")

// Append writes ents (consecutive, as raft hands them to be stored): a
// suffix that conflicts is cut first (the log's TruncateTail, the marks
// in the state file). Records are written, not committed: the caller
// commits the log (Commit, or a commit round) before it tells raft they
// are stored. Marks reach the state file durably before Append returns.
func (s *Storage) Append(ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first := ents[0].GetIndex()
	last := s.lastLocked()
	switch {
	case first <= s.st.snapIndex:
		return fmt.Errorf("braid/replica: append at entry %d, at or before the compaction point %d", first, s.st.snapIndex)
	case first > last+1:
		return fmt.Errorf("%w: entry %d after entry %d", ErrGap, first, last)
	}
	stateChanged := false
	if first <= last {
		// Cut the conflicting suffix: the frames, then the marks.
		for i := first; i <= last; i++ {
			if sl := s.slotLocked(i); sl.count > 0 {
				if err := s.log.TruncateTail(sl.first); err != nil {
					return fmt.Errorf("braid/replica: cutting the log from entry %d: %w", i, err)
				}
				break
			}
		}
		s.slots = s.slots[:first-s.st.snapIndex-1]
		if k, _ := slices.BinarySearchFunc(s.st.marks, first, func(m mark, i uint64) int { return cmpU(m.index, i) }); k < len(s.st.marks) {
			s.st.marks = s.st.marks[:k]
			stateChanged = true
		}
	}
	for k, e := range ents {
		if e.GetIndex() != first+uint64(k) {
			return fmt.Errorf("%w: entry %d after entry %d", ErrGap, e.GetIndex(), first+uint64(k)-1)
		}
		if !carriesRecords(e) {
			s.st.marks = append(s.st.marks, mark{index: e.GetIndex(), term: e.GetTerm(), typ: e.GetType(), data: slices.Clone(e.Data)})
			stateChanged = true
		}
	}
	// The marks reach the state file before the frames after them reach
	// the log: a frame on disk always has the marks before it, so that a
	// log whose first frame does not follow is a dropped head, not what a
	// crash left.
	if stateChanged {
		if err := s.writeStateLocked(); err != nil {
			return err
		}
		s.marksAt = s.staged
	}
	// Marks staged in the journal (by this call or an earlier one of the
	// round) are made durable before a frame after them is written.
	if s.marksAt > 0 && slices.ContainsFunc(ents, carriesRecords) {
		if err := s.syncStateLocked(); err != nil {
			return err
		}
		s.marksAt = 0
	}
	for _, e := range ents {
		if !carriesRecords(e) {
			s.slots = append(s.slots, slot{term: e.GetTerm()})
			continue
		}
		off, err := s.log.WriteEntryData(wal.EntryID{Term: e.GetTerm(), Index: e.GetIndex()}, e.Data)
		if err != nil {
			return fmt.Errorf("braid/replica: writing entry %d: %w", e.GetIndex(), err)
		}
		s.slots = append(s.slots, slot{term: e.GetTerm(), first: off, count: s.log.WrittenOffset() - off})
	}
	return nil
}

// carriesRecords says whether e is stored in the log (a proposal of
// records) rather than as a mark.
func carriesRecords(e *pb.Entry) bool {
	return e.GetType() == pb.EntryNormal && len(e.Data) > 0 && !isSeal(e.Data)
}

// sealData is the data of a seal entry: after it the group takes no
// record. It cannot be the data of records (its first size prefix
// overflows a uvarint), so it is told apart from them.
var sealData = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 's', 'e', 'a', 'l'}

func isSeal(data []byte) bool { return bytes.Equal(data, sealData) }

// SealIndex returns the index of the first seal entry the log holds (its
// marks), or 0. It is the group's seal once committed.
func (s *Storage) SealIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.st.marks {
		if m.typ == pb.EntryNormal && isSeal(m.data) {
			return m.index
		}
	}
	return 0
}

// SetHardState records hs. A change of term or vote reaches the state file
// durably before it returns (raft must not send a vote or act in a term
// that a crash could forget); the commit index alone is kept in memory
// and written with the next change (a restarted replica learns it again
// from its leader).
func (s *Storage) SetHardState(hs *pb.HardState) error {
	if hs == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.term, s.st.vote = hs.GetTerm(), hs.GetVote()
	s.st.commit = max(s.st.commit, hs.GetCommit())
	if s.st.term == s.stored.term && s.st.vote == s.stored.vote {
		return nil
	}
	return s.writeStateLocked()
}

// PersistCommit writes the commit index i to the state file durably now
// (SetHardState keeps a commit index alone in memory): a replica records
// that its seal is committed, so that it knows it at its next start.
func (s *Storage) PersistCommit(i uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i <= s.st.commit && s.stored.commit >= i {
		return nil
	}
	s.st.commit = max(s.st.commit, min(i, s.lastLocked()))
	if err := s.writeStateLocked(); err != nil {
		return err
	}
	return s.syncStateLocked()
}

// NoteCommit writes the commit index i to the state, to be durable with
// the next write that is synced (PersistCommit syncs at once): a replica
// stopped records what it knows was committed, so that its next start
// serves it without waiting to hear it again.
func (s *Storage) NoteCommit(i uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i <= s.stored.commit {
		return nil
	}
	s.st.commit = max(s.st.commit, min(i, s.lastLocked()))
	return s.writeStateLocked()
}

// SaveState writes the state to the state file durably now: with a state
// journal the file otherwise follows at the journal's checkpoint, and a
// copy of the group's files made for another node must carry it.
func (s *Storage) SaveState() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return nil // the file is the state
	}
	if err := wal.ReplaceFile(s.fsys, s.path, s.st.encode()); err != nil {
		return fmt.Errorf("braid/replica: writing %s: %w", s.path, err)
	}
	return nil
}

// Commit is the log's Commit: the records Append wrote are durable after
// it.
func (s *Storage) Commit() error {
	_, err := s.log.Commit()
	return err
}

// writeStateLocked writes the state: to the state journal (durable at its
// next sync: the host's round, or syncStateLocked), else to the state file
// durably.
func (s *Storage) writeStateLocked() error {
	s.st.seq++
	if s.journal != nil {
		s.staged = s.journal.stage(s.rel, s.st.encode())
	} else if err := wal.ReplaceFile(s.fsys, s.path, s.st.encode()); err != nil {
		return fmt.Errorf("braid/replica: writing %s: %w", s.path, err)
	}
	s.stored.term, s.stored.vote, s.stored.commit = s.st.term, s.st.vote, s.st.commit
	return nil
}

// syncStateLocked makes the state written durable now (it is already
// without a journal).
func (s *Storage) syncStateLocked() error {
	if s.journal == nil {
		return nil
	}
	return s.journal.SyncTo(s.staged)
}
