package actors

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/braidmq/braid/routing"
	"github.com/braidmq/braid/topology"
	"github.com/braidmq/braid/wal"
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

// LogStore owns the open bucket logs of this node and the append signals of
// each topic. It is safe for concurrent use.
//
// Layout on disk: <dir>/<tenant>/<namespace>/<topic>/<incarnation>/seg-<id>/b-<n>/
// (topics created before incarnations: without the <incarnation> level).
type LogStore struct {
	dir string
	fs  wal.FS // nil: wal.OSFS
	// shared makes the commits of every log durable together (nil: each
	// on its own); see wal.SharedSync.
	shared *wal.SharedSync

	mu sync.Mutex
	// incarnations holds the incarnation of every topic known here, by
	// URI ("" for a topic from before incarnations).
	incarnations map[string]string
	// logs holds every open log; a log is opened on first use. byTopic
	// holds the keys of logs by topic.
	logs    map[UnitKey]*wal.Log
	byTopic map[routing.TopicName]map[UnitKey]bool
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

// NewLogStore returns a store rooted at dir that reports to events.
// fsys is the file system the logs are written through (nil: wal.OSFS).
func NewLogStore(dir string, fsys wal.FS, events LogEvents) *LogStore {
	return &LogStore{dir: dir, fs: fsys, logs: map[UnitKey]*wal.Log{}, byTopic: map[routing.TopicName]map[UnitKey]bool{}, signals: map[string]chan struct{}{}, events: events,
		incarnations: map[string]string{}}
}

// SetIncarnation says which incarnation of topic t is served here: its
// logs are in the directory of that name under the topic's.
func (s *LogStore) SetIncarnation(t routing.TopicName, incarnation string) {
	s.mu.Lock()
	s.incarnations[t.String()] = incarnation
	s.mu.Unlock()
}

// NameDir is the directory of everything stored under a topic's name,
// every incarnation of it.
func (s *LogStore) NameDir(t routing.TopicName) string {
	return filepath.Join(s.dir, t.Tenant, t.Namespace, t.Name)
}

// TopicDir is the directory of a topic's logs: its incarnation's.
func (s *LogStore) TopicDir(t routing.TopicName) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topicDirLocked(t)
}

// topicDirLocked is TopicDir for a caller holding mu.
func (s *LogStore) topicDirLocked(t routing.TopicName) string {
	return filepath.Join(s.NameDir(t), s.incarnations[t.String()])
}

// unitDirLocked is the directory of a unit's log; the caller holds mu.
func (s *LogStore) unitDirLocked(k UnitKey) string {
	return filepath.Join(s.topicDirLocked(k.Topic), fmt.Sprintf("seg-%d", k.Segment), fmt.Sprintf("b-%d", k.Bucket))
}

// Log returns the open log of a unit, opening (and repairing) it on first use.
func (s *LogStore) Log(k UnitKey, opts wal.Options) (*wal.Log, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.logs[k]; ok {
		return l, nil
	}
	if s.fs != nil {
		opts.FS = s.fs
	}
	opts.SharedSync = s.shared
	if hole := s.events.Hole; hole != nil {
		opts.OnHole = func(h wal.Hole) { hole(k, h) }
	}
	l, err := wal.Open(s.unitDirLocked(k), opts)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", k, err)
	}
	if r := l.Repair(); r != (wal.RepairReport{}) && s.events.Repaired != nil {
		s.events.Repaired(k, r)
	}
	s.logs[k] = l
	if s.byTopic[k.Topic] == nil {
		s.byTopic[k.Topic] = map[UnitKey]bool{}
	}
	s.byTopic[k.Topic][k] = true
	return l, nil
}

// Reopen closes a unit's log and opens it again (repairing its tail): what a
// restarted bucket actor does.
func (s *LogStore) Reopen(k UnitKey, opts wal.Options) (*wal.Log, error) {
	s.mu.Lock()
	if l, ok := s.logs[k]; ok {
		_ = l.Close()
		s.forgetLocked(k)
	}
	s.mu.Unlock()
	return s.Log(k, opts)
}

// Signal wakes everyone waiting on the topic's Appended channel.
func (s *LogStore) Signal(topic string) {
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
func (s *LogStore) Appended(topic string) <-chan struct{} {
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
func (s *LogStore) CloseSegment(t routing.TopicName, seg topology.SegmentID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.byTopic[t] {
		if k.Segment == seg {
			_ = s.logs[k].Close()
			s.forgetLocked(k)
		}
	}
}

// RemoveSegment closes and deletes the logs of one segment.
func (s *LogStore) RemoveSegment(t routing.TopicName, seg topology.SegmentID) error {
	s.CloseSegment(t, seg)
	return os.RemoveAll(filepath.Join(s.TopicDir(t), fmt.Sprintf("seg-%d", seg)))
}

// RemoveTopic closes and deletes every log of a topic: its incarnation's
// directory, and its name's directory once nothing else is left in it.
func (s *LogStore) RemoveTopic(t routing.TopicName) error {
	_ = s.CloseTopic(t)
	if err := os.RemoveAll(s.TopicDir(t)); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(s.NameDir(t), deletingMarker))
	_ = os.Remove(s.NameDir(t)) // fails, as it should, if an older incarnation's files are there
	s.mu.Lock()
	delete(s.incarnations, t.String())
	s.mu.Unlock()
	return nil
}

// Close closes every log (each syncs first).
func (s *LogStore) Close() error {
	return s.closeWhere(func(UnitKey) bool { return true })
}

func (s *LogStore) closeWhere(match func(UnitKey) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
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
func (s *LogStore) forgetLocked(k UnitKey) {
	delete(s.logs, k)
	if keys := s.byTopic[k.Topic]; keys != nil {
		delete(keys, k)
		if len(keys) == 0 {
			delete(s.byTopic, k.Topic)
		}
	}
}

// OpenLogs is the number of logs open.
func (s *LogStore) OpenLogs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.logs)
}

// CloseTopic closes the logs of a topic (they reopen on demand).
func (s *LogStore) CloseTopic(t routing.TopicName) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for k := range s.byTopic[t] {
		if err := s.logs[k].Close(); err != nil && first == nil {
			first = fmt.Errorf("close log %s: %w", k, err)
		}
		s.forgetLocked(k)
	}
	return first
}
