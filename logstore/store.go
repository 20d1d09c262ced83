package logstore

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
	"github.com/braidmq/braid/wal/tier"
	"github.com/prometheus/client_golang/prometheus"
)

// UnitKey names one bucket log.
type UnitKey struct {
	Topic   routing.TopicName
	Segment topology.SegmentID
	Bucket  int
}

func (k UnitKey) String() string {
	return fmt.Sprintf("%s/seg-%d/b-%d", k.Topic, k.Segment, k.Bucket)
}

// A Store owns the open bucket logs of this node and the append signals of
// each topic, and commits their appends (Group). It is safe for
// concurrent use.
//
// Layout on disk: <dir>/<tenant>/<namespace>/<topic>/<incarnation>/seg-<id>/b-<n>/
// (topics created before incarnations: without the <incarnation> level).
type Store struct {
	dir string
	fs  wal.FS // nil: wal.OSFS
	// tier holds the files of logs offloaded to the remote tier (nil:
	// none); a removal of logs removes what it holds of them.
	tier *tier.Tier
	// syncMode is how the rounds of the node's commits sync (see
	// wal.CommitGroup); commits is the Group that makes them, from the
	// first committer on (commitsOnce), and logger hears what it has to
	// say.
	syncMode wal.SyncMode
	journal  *wal.Journal // nil: no journal (see OpenJournal)
	// directBytes is Options.JournalDirectBytes.
	directBytes int
	// files holds the logs' descriptors (nil: each log keeps its own).
	files       *wal.FileCache
	commits     any // *Group[R], of the one R the node's buckets use
	commitGroup atomic.Pointer[wal.CommitGroup]
	// journalView is journal, for the metrics.
	journalView atomic.Pointer[wal.Journal]
	commitsOnce sync.Once
	// commitGroupOnce makes commitGroup (CommitGroup).
	commitGroupOnce sync.Once
	logger          *slog.Logger
	holdReplies     func() (release func())
	ackFence        func() error // see Options.AckFence
	metrics         metrics

	mu sync.Mutex
	// incarnations holds the incarnation of every topic known here, by
	// URI ("" for a topic from before incarnations).
	incarnations map[string]string
	// logs holds every open log; a log is opened on first use. byTopic
	// holds the keys of logs by topic.
	logs    map[UnitKey]*wal.Log
	byTopic map[routing.TopicName]map[UnitKey]bool
	// opening holds the logs being opened, outside mu (an open makes
	// directories and files durably: a node opening thousands of logs at
	// once waits for their syncs together). Closing a unit's logs waits
	// for its opens first.
	opening map[UnitKey]*logOpen
	// signals holds, per topic URI, the channel closed at the next append.
	signals map[string]chan struct{}
	events  LogEvents
}

// LogEvents is what a LogStore reports of the logs it opens; either may be
// nil.
type LogEvents struct {
	// Repaired hears of every log whose tail Open cut, or in which it found
	// holes.
	Repaired func(UnitKey, wal.RepairReport)
	// Hole hears of every run of records lost to damage (wal.Hole), once
	// per log opened: at open, or as a read finds it in an older file. It
	// is called with the log's read lock held and must not use the log.
	Hole func(UnitKey, wal.Hole)
}

// Options configure a Store; the zero value is a store whose logs each
// keep their own descriptors and sync with syncfs.
type Options struct {
	// FS is the file system the logs are written through (nil: wal.OSFS).
	FS wal.FS
	// Events hears of what opening logs found.
	Events LogEvents
	// SyncMode is how the rounds of commits sync (see wal.CommitGroup).
	SyncMode wal.SyncMode
	// MaxOpenFiles bounds the descriptors the logs hold at once (their
	// files are closed and opened again as needed: wal.FileCache); 0: no
	// bound, each log keeps its own.
	MaxOpenFiles int
	// JournalDirectBytes, with a journal (OpenJournal), makes it adaptive
	// (wal.Journal.SyncDirectlyFrom); 0 journals every commit.
	JournalDirectBytes int
	// HoldReplies, when set, is called by the Group before it acknowledges
	// a round of appends, and the function it returns after: the
	// front-end may hold the replies meanwhile and send them in one write.
	HoldReplies func() (release func())
	// AckFence, when set, is asked before appends made durable are
	// acknowledged: an error answers them with it instead (the node's
	// lease has run out, and another node may have sealed its segments).
	AckFence func() error
	// Tier is the remote tier (nil: none): a removal of logs removes what
	// it holds of them, and a unit's first offset is the tier's when it
	// holds older ones (FirstOffset).
	Tier   *tier.Tier
	Logger *slog.Logger
	// Registerer gets the store's metrics (nil: none), and MaxOpenLogs is
	// the budget braid_wal_open_logs_limit shows.
	Registerer  prometheus.Registerer
	MaxOpenLogs int
}

// New returns a store rooted at dir.
func New(dir string, opts Options) *Store {
	s := &Store{dir: dir, fs: opts.FS, logs: map[UnitKey]*wal.Log{}, byTopic: map[routing.TopicName]map[UnitKey]bool{},
		signals: map[string]chan struct{}{}, events: opts.Events, incarnations: map[string]string{},
		syncMode: opts.SyncMode, directBytes: opts.JournalDirectBytes, holdReplies: opts.HoldReplies, ackFence: opts.AckFence,
		tier: opts.Tier, logger: opts.Logger, metrics: newMetrics()}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if opts.MaxOpenFiles > 0 {
		s.files = wal.NewFileCache(opts.MaxOpenFiles)
	}
	s.register(opts.Registerer, opts.MaxOpenLogs)
	return s
}

// GroupOf returns the store's Group, whose requests are Rs, making it on
// first use. A store commits requests of one type only.
func GroupOf[R Request](s *Store) *Group[R] {
	s.commitsOnce.Do(func() {
		s.commits = newGroup[R](s.CommitGroup(), s.logger, s.holdReplies, s.ackFence)
	})
	return s.commits.(*Group[R])
}

// CommitGroup returns the wal.CommitGroup the store's rounds sync
// through, making it on first use: the bucket logs' Group, and the rounds
// of other logs of the node's (replica logs) that should share its
// journal.
func (s *Store) CommitGroup() *wal.CommitGroup {
	s.commitGroupOnce.Do(func() {
		mode := s.syncMode
		if s.fs != nil && s.fs != wal.OSFS {
			mode = wal.SyncEach // files of other file systems sync one by one anyway
		}
		g, err := s.newCommitGroup(mode)
		if err != nil && mode == wal.SyncFS {
			s.logger.Error("bucket log commits: cannot syncfs the data directory; each log's commit is an fdatasync of its own",
				"dir", s.dir, "err", err)
			g, err = s.newCommitGroup(wal.SyncEach)
		}
		if err != nil {
			panic(err) // SyncEach opens nothing
		}
		s.commitGroup.Store(g)
	})
	return s.commitGroup.Load()
}

// AckFence is Options.AckFence (nil: none).
func (s *Store) AckFence() func() error { return s.ackFence }

func (s *Store) newCommitGroup(mode wal.SyncMode) (*wal.CommitGroup, error) {
	if mode == wal.SyncFS {
		if err := os.MkdirAll(s.dir, 0o750); err != nil {
			return nil, err
		}
	}
	return wal.NewCommitGroup(s.dir, mode, s.journal)
}

// JournalReport is what opening a store's journal found.
type JournalReport = wal.JournalReplay

// OpenJournal replays the journal in dir into the store's logs (what a
// crash left there) and opens it: from then on, the commits of the
// store's logs under DurabilityAlways are made durable by one write and
// one sync of the journal per round (see wal.Journal). Call it before any
// log is opened. onCheckpointError hears of the checkpoints that fail.
func (s *Store) OpenJournal(dir string, maxBytes int64, onCheckpointError func(error)) (JournalReport, error) {
	fsys := s.fs
	if fsys == nil {
		fsys = wal.OSFS
	}
	rep, err := wal.ReplayJournal(dir, s.dir, fsys)
	if err != nil {
		return rep, err
	}
	j, err := wal.OpenJournal(dir, s.dir, fsys, maxBytes)
	if err != nil {
		return rep, err
	}
	j.OnCheckpointError(onCheckpointError)
	j.SyncDirectlyFrom(s.directBytes)
	s.journal = j
	s.journalView.Store(j)
	return rep, nil
}

// CommitCounts are the node's commit rounds so far.
func (s *Store) CommitCounts() wal.CommitGroupCounts {
	if g := s.commitGroup.Load(); g != nil {
		return g.Counts()
	}
	return wal.CommitGroupCounts{}
}

// FileCounts are what the descriptor cache did and holds.
func (s *Store) FileCounts() wal.FileCacheCounts {
	if s.files == nil {
		return wal.FileCacheCounts{}
	}
	return s.files.Counts()
}

// JournalCounts are what the journal did so far.
func (s *Store) JournalCounts() wal.JournalCounts {
	if j := s.journalView.Load(); j != nil {
		return j.Counts()
	}
	return wal.JournalCounts{}
}

// Journal returns the store's journal (nil without one).
func (s *Store) Journal() *wal.Journal { return s.journal }

// Incarnation returns the incarnation the store keeps the logs of t in.
func (s *Store) Incarnation(t routing.TopicName) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.incarnations[t.String()]
}

// SetIncarnation says which incarnation of topic t is served here: its
// logs are in the directory of that name under the topic's.
func (s *Store) SetIncarnation(t routing.TopicName, incarnation string) {
	s.mu.Lock()
	s.incarnations[t.String()] = incarnation
	s.mu.Unlock()
}

// NameDir is the directory of everything stored under a topic's name,
// every incarnation of it.
func (s *Store) NameDir(t routing.TopicName) string {
	return filepath.Join(s.dir, t.Tenant, t.Namespace, t.Name)
}

// TopicDir is the directory of a topic's logs: its incarnation's.
func (s *Store) TopicDir(t routing.TopicName) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topicDirLocked(t)
}

// topicDirLocked is TopicDir for a caller holding mu.
func (s *Store) topicDirLocked(t routing.TopicName) string {
	return filepath.Join(s.NameDir(t), s.incarnations[t.String()])
}

// UnitDir is the directory of a unit's log on this node, whether this node
// holds the log or not (the compacted logs of a unit another node owns are
// kept there by the topic's home).
func (s *Store) UnitDir(k UnitKey) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unitDirLocked(k)
}

// unitDirLocked is the directory of a unit's log; the caller holds mu.
func (s *Store) unitDirLocked(k UnitKey) string {
	return filepath.Join(s.topicDirLocked(k.Topic), fmt.Sprintf("seg-%d", k.Segment), fmt.Sprintf("b-%d", k.Bucket))
}

// RaftStateFile is the name of a replicated unit's raft state file in its
// log directory (package replica).
const RaftStateFile = "raft-state"

// logOpen is an open of a log under way (Store.Log).
type logOpen struct {
	done chan struct{}
	err  error
}

// waitOpensLocked waits until no log matching match is being opened; the
// caller holds mu (released while it waits).
func (s *Store) waitOpensLocked(match func(UnitKey) bool) {
	for {
		var wait chan struct{}
		for k, o := range s.opening {
			if match(k) {
				wait = o.done
				break
			}
		}
		if wait == nil {
			return
		}
		s.mu.Unlock()
		<-wait
		s.mu.Lock()
	}
}

// Log returns the open log of a unit, opening (and repairing) it on first
// use: one open a unit at a time, any number of units at once.
func (s *Store) Log(k UnitKey, opts wal.Options) (*wal.Log, error) {
	s.mu.Lock()
	for {
		if l, ok := s.logs[k]; ok {
			s.mu.Unlock()
			return l, nil
		}
		o := s.opening[k]
		if o == nil {
			break
		}
		s.mu.Unlock()
		<-o.done
		if o.err != nil {
			return nil, o.err
		}
		s.mu.Lock()
	}
	if s.fs != nil {
		opts.FS = s.fs
	}
	if s.journal != nil && opts.Durability == wal.DurabilityAlways {
		opts.Journal = s.journal
	}
	opts.Files = s.files
	if hole := s.events.Hole; hole != nil {
		opts.OnHole = func(h wal.Hole) { hole(k, h) }
	}
	dir := s.unitDirLocked(k)
	if s.opening == nil {
		s.opening = map[UnitKey]*logOpen{}
	}
	o := &logOpen{done: make(chan struct{})}
	s.opening[k] = o
	s.mu.Unlock()
	l, err := s.openLog(k, dir, opts)
	s.mu.Lock()
	delete(s.opening, k)
	if err == nil {
		s.logs[k] = l
		if s.byTopic[k.Topic] == nil {
			s.byTopic[k.Topic] = map[UnitKey]bool{}
		}
		s.byTopic[k.Topic][k] = true
	}
	o.err = err
	s.mu.Unlock()
	close(o.done)
	return l, err
}

// openLog opens (and repairs) the log of unit k in dir.
func (s *Store) openLog(k UnitKey, dir string, opts wal.Options) (*wal.Log, error) {
	l, err := wal.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", k, err)
	}
	if _, err := os.Stat(filepath.Join(dir, RaftStateFile)); err == nil {
		// A replica's log: readers see what its raft group says is
		// committed, nothing until the group runs (package replica).
		l.SetReadLimit(0)
	}
	if r := l.Repair(); r != (wal.RepairReport{}) && s.events.Repaired != nil {
		s.events.Repaired(k, r)
	}
	return l, nil
}

// Reopen closes a unit's log and opens it again (repairing its tail): what a
// restarted bucket actor does.
func (s *Store) Reopen(k UnitKey, opts wal.Options) (*wal.Log, error) {
	s.mu.Lock()
	s.waitOpensLocked(func(o UnitKey) bool { return o == k })
	if l, ok := s.logs[k]; ok {
		_ = l.Close()
		s.forgetLocked(k)
	}
	s.mu.Unlock()
	return s.Log(k, opts)
}

// Signal wakes everyone waiting on the topic's Appended channel.
func (s *Store) Signal(topic string) {
	s.mu.Lock()
	ch, ok := s.signals[topic]
	if ok {
		delete(s.signals, topic)
	}
	s.mu.Unlock()
	if ok {
		close(ch)
	}
}

// Appended returns a channel closed at the topic's next Signal.
func (s *Store) Appended(topic string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.signals[topic]
	if !ok {
		ch = make(chan struct{})
		s.signals[topic] = ch
	}
	return ch
}

// CloseSegment closes the logs of one segment (they reopen on demand).
func (s *Store) CloseSegment(t routing.TopicName, seg topology.SegmentID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitOpensLocked(func(k UnitKey) bool { return k.Topic == t && k.Segment == seg })
	for k := range s.byTopic[t] {
		if k.Segment == seg {
			_ = s.logs[k].Close()
			s.forgetLocked(k)
		}
	}
}

// RemoveSegment closes and deletes the logs of one segment.
func (s *Store) RemoveSegment(t routing.TopicName, seg topology.SegmentID) error {
	s.CloseSegment(t, seg)
	return s.RemoveLogs(filepath.Join(s.TopicDir(t), fmt.Sprintf("seg-%d", seg)))
}

// RemoveTopic closes and deletes every log of a topic: its incarnation's
// directory, and its name's directory once nothing else is left in it.
func (s *Store) RemoveTopic(t routing.TopicName) error {
	_ = s.CloseTopic(t)
	if err := s.RemoveLogs(s.TopicDir(t)); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(s.NameDir(t), DeletingMarker))
	_ = os.Remove(filepath.Join(s.NameDir(t), HostedMarker))
	_ = os.Remove(s.NameDir(t)) // fails, as it should, if an older incarnation's files are there
	s.mu.Lock()
	delete(s.incarnations, t.String())
	s.mu.Unlock()
	return nil
}

// Close closes every log (each syncs first).
func (s *Store) Close() error {
	err := s.closeWhere(func(UnitKey) bool { return true })
	if g := s.commitGroup.Load(); g != nil {
		_ = g.Close()
	}
	if s.journal != nil {
		// The logs synced their files as they closed: the checkpoint
		// finds nothing left and removes the journal's files.
		if jerr := s.journal.Close(); jerr != nil && err == nil {
			err = fmt.Errorf("close the journal: %w", jerr)
		}
	}
	return err
}

func (s *Store) closeWhere(match func(UnitKey) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitOpensLocked(match)
	var first error
	for k, l := range s.logs {
		if match(k) {
			if err := l.Close(); err != nil && first == nil {
				first = fmt.Errorf("close log %s: %w", k, err)
			}
			s.forgetLocked(k)
		}
	}
	return first
}

// forgetLocked drops a closed log from the maps; the caller holds mu.
func (s *Store) forgetLocked(k UnitKey) {
	delete(s.logs, k)
	if keys := s.byTopic[k.Topic]; keys != nil {
		delete(keys, k)
		if len(keys) == 0 {
			delete(s.byTopic, k.Topic)
		}
	}
}

// Logs returns the logs open now, by unit.
func (s *Store) Logs() map[UnitKey]*wal.Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[UnitKey]*wal.Log, len(s.logs))
	for k, l := range s.logs {
		out[k] = l
	}
	return out
}

// OpenLogs is the number of logs open.
func (s *Store) OpenLogs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.logs)
}

// CloseTopic closes the logs of a topic (they reopen on demand).
func (s *Store) CloseTopic(t routing.TopicName) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitOpensLocked(func(k UnitKey) bool { return k.Topic == t })
	var first error
	for k := range s.byTopic[t] {
		if err := s.logs[k].Close(); err != nil && first == nil {
			first = fmt.Errorf("close log %s: %w", k, err)
		}
		s.forgetLocked(k)
	}
	return first
}

// Markers in a topic's name directory: DeletingMarker says a deletion of
// the topic is under way (it is finished at the next start); HostedMarker
// says the directory holds the logs this node writes for another node's
// topic.
const (
	DeletingMarker = "DELETING"
	HostedMarker   = "HOSTED"
)
