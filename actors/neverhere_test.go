package actors

import (
	"testing"
	"time"

	"github.com/braidmq/braid/meta"
)

// TestNeverHere: a sealed segment this node owns but holds no directory of
// reads as empty only when its topic was made after this data directory
// (beyond the nodes' clock skew): then nothing of it was ever written
// here. A topic older than the directory (the disk was replaced since)
// is data lost, and stays UNAVAILABLE; so does any topic when the
// directory's age is unknown.
func TestNeverHere(t *testing.T) {
	since := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	m := &Manager{cfg: Config{DataSince: since}}
	for _, c := range []struct {
		created time.Time
		want    bool
	}{
		{since.Add(time.Minute), true},
		{since.Add(clockSkew / 2), false}, // within the clocks' skew
		{since.Add(-time.Hour), false},    // the disk is newer: data lost
		{time.Time{}, false},
	} {
		if got := m.neverHere(meta.TopicRecord{Created: c.created}); got != c.want {
			t.Errorf("topic made at %v, directory at %v: neverHere %v, want %v", c.created, since, got, c.want)
		}
	}
	unknown := &Manager{}
	if unknown.neverHere(meta.TopicRecord{Created: since}) {
		t.Error("neverHere without the directory's age")
	}
}
