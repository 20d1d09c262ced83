package actors

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/braidmq/braid/logstore"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/meta"
	"github.com/braidmq/braid/routing"
)

// What a start finds on disk beside the metadata store, and how a topic
// that cannot be served is set aside.
//
// A topic's logs live under <topics dir>/<tenant>/<namespace>/<name>/, in a
// directory named by the incarnation its record carries (a new random id
// each time a topic is created), so a topic created again under an old
// name never serves the files an earlier one left. A directory of a name
// the store has no record of means the store lost or never had the topic:
// unless the node was deleting it (the deletingMarker it writes before the
// record goes), the start is refused, since serving without the record
// would let the name be created again over data the store forgot.

// deletingMarker is the file a topic's directory holds while its delete is
// under way: a directory without a record that holds it is the rest of a
// delete a crash cut short, and is removed at start.
const deletingMarker = logstore.DeletingMarker

// hostedMarker is the file the name directory of a topic holds when this
// node wrote segments of it for another node, the topic's home: a
// directory without a record that holds it is of a topic its home deleted
// while this node could not be told (it was down), and is removed at
// start.
const hostedMarker = logstore.HostedMarker

// newIncarnation returns a fresh incarnation id.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrOrphanLogs is returned (wrapped) by Recover when the topics directory
// holds the logs of topics the metadata store has no record of.
var ErrOrphanLogs = errors.New("braid/actors: topic logs without a metadata record")

// checkDisk compares the topic directories on disk with the records of the
// store: it removes what a cut-short delete left, reports leftovers of
// earlier incarnations, quarantines a topic whose record does not read or
// validate, and refuses (ErrOrphanLogs) directories of names without a
// record. Only topics that ever opened a log have a directory, so this
// reads the records of those, never the whole store. It returns how many
// topic directories it found.
func (m *Manager) checkDisk(ctx context.Context) (int, error) {
	var orphans []string
	checked := 0
	tenants, _ := os.ReadDir(m.cfg.DataDir)
	for _, te := range tenants {
		if !te.IsDir() {
			continue
		}
		nss, _ := os.ReadDir(filepath.Join(m.cfg.DataDir, te.Name()))
		for _, ne := range nss {
			if !ne.IsDir() {
				continue
			}
			names, _ := os.ReadDir(filepath.Join(m.cfg.DataDir, te.Name(), ne.Name()))
			for _, na := range names {
				if !na.IsDir() {
					continue
				}
				checked++
				name := routing.TopicName{Scheme: routing.SchemeScalable, Tenant: te.Name(), Namespace: ne.Name(), Name: na.Name()}
				dir := filepath.Join(m.cfg.DataDir, te.Name(), ne.Name(), na.Name())
				rec, _, err := m.meta.Topic(ctx, name)
				switch {
				case errors.Is(err, meta.ErrNotFound) && fileExists(filepath.Join(dir, deletingMarker)):
					m.log.Warn("removing the logs of a topic whose delete was cut short", "topic", name.String(), "dir", dir)
					if err := m.store.RemoveLogs(dir); err != nil {
						return checked, fmt.Errorf("remove %s: %w", dir, err)
					}
				case errors.Is(err, meta.ErrNotFound) && fileExists(filepath.Join(dir, hostedMarker)):
					m.log.Warn("removing the logs of segments this node held for a topic deleted on its home", "topic", name.String(), "dir", dir)
					if err := m.store.RemoveLogs(dir); err != nil {
						return checked, fmt.Errorf("remove %s: %w", dir, err)
					}
				case errors.Is(err, meta.ErrNotFound):
					orphans = append(orphans, dir)
				case errors.Is(err, meta.ErrCorrupt):
					m.quarantine(name.String(), err)
				case err != nil:
					return checked, fmt.Errorf("read the record of %s: %w", name, err)
				default:
					m.reportLeftovers(name, dir, rec.Incarnation)
				}
			}
		}
	}
	if len(orphans) == 0 {
		return checked, nil
	}
	sort.Strings(orphans)
	shown := orphans
	if len(shown) > 10 {
		shown = shown[:10]
	}
	return checked, fmt.Errorf("%w: the metadata store has no record of the %d topics whose logs are in %s (the store may be lost or damaged): "+
		"restore it, or move these directories away to start without them; refusing to start so that no topic is created again over them",
		ErrOrphanLogs, len(orphans), strings.Join(shown, ", "))
}

// reportLeftovers logs what a topic's name directory holds beside its
// incarnation's: files of an earlier topic of the same name, not served.
func (m *Manager) reportLeftovers(name routing.TopicName, dir, inc string) {
	if inc == "" {
		return // a topic from before incarnations: its logs are dir itself
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		if e.Name() != inc && e.Name() != deletingMarker && e.Name() != hostedMarker {
			left = append(left, e.Name())
		}
	}
	if len(left) > 0 {
		m.log.Warn("the topic's directory holds files of an earlier topic of the same name; they are not served",
			"topic", name.String(), "dir", dir, "incarnation", inc, "others", left)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// quarantine sets a topic aside that cannot be served (its record does not
// read or validate, or it does not start): it is logged and counted, and
// every request naming it is answered TOPIC_QUARANTINED with the reason,
// while the other topics are served.
func (m *Manager) quarantine(uri string, err error) {
	m.log.Error("topic quarantined: it cannot be served until its record is repaired or it is deleted", "topic", uri, "err", err)
	m.mu.Lock()
	m.quarantined[uri] = err.Error()
	n := len(m.quarantined)
	m.mu.Unlock()
	m.m.quarantined.Set(float64(n))
}

// quarantinedError is the error of requests naming a quarantined topic.
func quarantinedError(uri, reason string) error {
	return api.Errorf(api.CodeTopicQuarantined, "topic %s is quarantined: %s", uri, reason)
}

// openJournal replays what a crash left in the node's journal into the
// bucket logs and opens the journal for the commits to come.
func (m *Manager) openJournal() error {
	t0 := time.Now()
	rep, err := m.store.OpenJournal(m.cfg.JournalDir, m.cfg.JournalBytes, func(err error) {
		m.log.Error("journal checkpoint failed; its files stay until one succeeds", "dir", m.cfg.JournalDir, "err", err)
	})
	if err != nil {
		return fmt.Errorf("the journal in %s: %w", m.cfg.JournalDir, err)
	}
	if len(rep.Damaged) > 0 {
		m.log.Error("journal replay stopped early in damaged files: what they held after the damage is not replayed",
			"files", rep.Damaged, "entries_replayed", rep.Entries)
	}
	if rep.Files > 0 {
		m.log.Info("journal replayed into the bucket logs", "dir", m.cfg.JournalDir, "files", rep.Files,
			"entries", rep.Entries, "bytes", rep.Bytes, "skipped", rep.Skipped, "took", time.Since(t0))
	}
	return nil
}
