package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/wal/crashfs"
)

// TestAcknowledgedMessagesSurviveAPowerLoss: a node whose bucket logs are
// on the crash file system takes produce requests spread over many topics,
// many in flight (so that the commits of many logs share rounds); then the
// machine loses power: everything not synced is gone. A new node on the
// same directories serves every acknowledged message at its offset. With
// the journal (the default) the logs' own files were never synced by a
// commit: the journal's replay restores them.
func TestAcknowledgedMessagesSurviveAPowerLoss(t *testing.T) {
	for _, commit := range []string{CommitJournal, "syncfs"} {
		t.Run(commit, func(t *testing.T) { testPowerLoss(t, commit) })
	}
}

func testPowerLoss(t *testing.T, commit string) {
	mem := crashfs.NewMem()
	dir := t.TempDir()
	configure := func(c *Config) { c.LogFS, c.CommitSync = mem, commit }
	n, nc := startNodeWith(t, dir, configure)
	const topics, messages, inFlight = 12, 600, 24
	for i := range topics {
		mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: fmt.Sprintf("topic://public/default/p%d", i), Segments: 1, Buckets: 1}, nil)
	}
	// acked[topic][offset] is the payload acknowledged there.
	acked := make([]map[uint64]string, topics)
	for i := range acked {
		acked[i] = map[uint64]string{}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, inFlight)
	errs := make(chan error, messages)
	for i := range messages {
		topic, payload := i%topics, fmt.Sprintf("m%d", i)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m, err := nc.RequestMsg(&nats.Msg{Subject: api.TopicSubject(api.ProducePrefix, "public", "default", fmt.Sprintf("p%d", topic)),
				Data: []byte(payload)}, 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			if c := m.Header.Get("Nats-Service-Error"); c != "" {
				errs <- fmt.Errorf("produce: %s", c)
				return
			}
			var r api.ProduceReply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			acked[topic][r.Offset] = payload
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// The commits of many logs shared rounds.
	m := scrape(t, n)
	rounds, logs := metricValue(t, m, "braid_commit_rounds_total"), metricValue(t, m, "braid_commit_round_logs_total")
	if rounds == 0 || logs/rounds < 1.5 {
		t.Fatalf("%v commit rounds covered %v logs: the commits of many logs did not share rounds", rounds, logs)
	}
	t.Logf("%v rounds, %.1f logs a round", rounds, logs/rounds)

	// The power goes: from here nothing reaches the disk, and what was
	// not synced is lost.
	mem.DieAfter(0)
	nc.Close()
	_ = n.Close() // its syncs fail: the disk is gone
	mem.Crash()

	n, nc = startNodeWith(t, dir, configure)
	defer stopNode(t, n, nc)
	for topic := range topics {
		got := readPayloads(t, nc, fmt.Sprintf("p%d", topic))
		if len(got) != len(acked[topic]) {
			t.Fatalf("topic p%d holds %d messages after the power loss, %d were acknowledged", topic, len(got), len(acked[topic]))
		}
		for off, payload := range got {
			if want := acked[topic][uint64(off)]; payload != want {
				t.Fatalf("topic p%d offset %d holds %q, %q was acknowledged there", topic, off, payload, want)
			}
		}
	}
}

// metricValue returns the value of a series without labels in a scrape.
func metricValue(t *testing.T, scraped, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(scraped, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in:\n%s", name, scraped)
	return 0
}
