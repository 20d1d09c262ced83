package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/braidmq/braid/wal"
)

// The state file keeps what raft needs of a group beside its log: the hard
// state (term, vote, commit), the configuration (voters, learners), the
// entry before the log's first (the compaction point), and the entries
// that carry no record (a new leader's empty entry, a configuration
// change), which take no offset in the log. It changes at elections, not
// per append. On a node, a change goes to the host's state journal
// (StateJournal: one fdatasync a round for every group), and reaches the
// file at the journal's checkpoint; without one the file is replaced
// whole and durably (wal.ReplaceFile) at each change.
//
//	magic "BRRS" | version 2 (1B) | CRC32C of the body (4B, LE) | body
//	body: term, vote, commit, snapIndex, snapTerm (uvarints),
//	      voter count, voters, learner count, learners (uvarints),
//	      mark count, marks: index, term, type, data length (uvarints), data,
//	      instance, seq (uvarints)
//
// instance names the group's state on this node (random, made by
// Bootstrap): a journal record of another instance (a group deleted, its
// path used again) is not this one's. seq counts the changes: of the file
// and the journal's records, the highest seq is the state. Version 1
// (without them) still reads, as instance 0, seq 0.

const (
	stateMagic   = "BRRS"
	stateVersion = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// mark is an entry that carries no record.
type mark struct {
	index, term uint64
	typ         pb.EntryType
	data        []byte
}

// state is the contents of a group's state file.
type state struct {
	term, vote, commit  uint64
	snapIndex, snapTerm uint64
	voters, learners    []uint64
	marks               []mark // by index
	instance, seq       uint64
}

func (s *state) encode() []byte {
	var body []byte
	u := func(v uint64) { body = binary.AppendUvarint(body, v) }
	u(s.term)
	u(s.vote)
	u(s.commit)
	u(s.snapIndex)
	u(s.snapTerm)
	for _, ids := range [][]uint64{s.voters, s.learners} {
		u(uint64(len(ids)))
		for _, id := range ids {
			u(id)
		}
	}
	u(uint64(len(s.marks)))
	for _, m := range s.marks {
		u(m.index)
		u(m.term)
		u(uint64(m.typ))
		u(uint64(len(m.data)))
		body = append(body, m.data...)
	}
	u(s.instance)
	u(s.seq)
	out := make([]byte, 0, len(stateMagic)+5+len(body))
	out = append(out, stateMagic...)
	out = append(out, stateVersion)
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(body, castagnoli))
	return append(out, body...)
}

// errBadState is wrapped by every failure to decode a state file.
var errBadState = errors.New("braid/replica: bad state file")

func decodeState(b []byte) (state, error) {
	var s state
	head := len(stateMagic) + 5
	if len(b) < head || string(b[:len(stateMagic)]) != stateMagic {
		return s, fmt.Errorf("%w: no magic", errBadState)
	}
	version := b[len(stateMagic)]
	if version != 1 && version != stateVersion {
		return s, fmt.Errorf("%w: version %d", errBadState, version)
	}
	body := b[head:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(stateMagic)+1:]) {
		return s, fmt.Errorf("%w: bad CRC", errBadState)
	}
	var err error
	u := func() uint64 {
		v, n := binary.Uvarint(body)
		if n <= 0 {
			err = fmt.Errorf("%w: truncated", errBadState)
			body = nil
			return 0
		}
		body = body[n:]
		return v
	}
	ids := func() []uint64 {
		n := u()
		if n > uint64(len(body)) {
			err = fmt.Errorf("%w: %d ids", errBadState, n)
			return nil
		}
		var out []uint64
		for range n {
			out = append(out, u())
		}
		return out
	}
	s.term, s.vote, s.commit, s.snapIndex, s.snapTerm = u(), u(), u(), u(), u()
	s.voters, s.learners = ids(), ids()
	n := u()
	if n > uint64(len(body)) {
		return s, fmt.Errorf("%w: %d marks", errBadState, n)
	}
	for range n {
		m := mark{index: u(), term: u(), typ: pb.EntryType(u())}
		size := u()
		if err != nil || size > uint64(len(body)) {
			return s, fmt.Errorf("%w: mark data", errBadState)
		}
		m.data = append([]byte(nil), body[:size]...)
		body = body[size:]
		s.marks = append(s.marks, m)
	}
	if version >= 2 {
		s.instance, s.seq = u(), u()
	}
	if err == nil && len(body) != 0 {
		err = fmt.Errorf("%w: %d bytes after the marks", errBadState, len(body))
	}
	return s, err
}

// readState reads the state file at path; a missing file is a new group's
// empty state.
func readState(fsys wal.FS, path string) (state, bool, error) {
	b, err := wal.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return state{}, false, nil
	}
	if err != nil {
		return state{}, false, err
	}
	s, err := decodeState(b)
	if err != nil {
		return state{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return s, true, nil
}
