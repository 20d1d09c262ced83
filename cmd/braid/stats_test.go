package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/braidmq/braid/api"
)

// topic stats and topic compaction print tables by default and JSON with
// -o json, as every command does.
func TestStatsAndCompactionTables(t *testing.T) {
	url := startServer(t)
	const uri = "topic://public/default/st"
	if _, _, err := run(t, nil, "topic", "create", uri, "--segments", "2", "--server", url); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, nil, "produce", uri, "--count", "40", "--keys", "4", "--server", url); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, nil, "consume", uri, "--subscription", "audit", "--count", "40", "--server", url); err != nil {
		t.Fatal(err)
	}
	table, _, err := run(t, nil, "topic", "stats", uri, "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{uri + "  epoch 1  40 messages", "UNIT", "0/0", "1/0", "SUBSCRIPTION", "audit", "storage worker:"} {
		if !strings.Contains(table, want) {
			t.Errorf("stats table lacks %q:\n%s", want, table)
		}
	}
	js, _, err := run(t, nil, "topic", "stats", uri, "-o", "json", "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	var st api.TopicStats
	if err := json.Unmarshal([]byte(js), &st); err != nil || st.Messages != 40 || len(st.Subscriptions) != 1 {
		t.Fatalf("stats -o json: %+v, %v\n%s", st, err, js)
	}
	table, _, err = run(t, nil, "topic", "compaction", uri, "--server", url)
	if err != nil || !strings.Contains(table, "no compaction running") || !strings.Contains(table, "never compacted") {
		t.Fatalf("compaction table: %v\n%s", err, table)
	}
	if done, _, err := run(t, nil, "topic", "compact", uri, "--server", url); err != nil || !strings.Contains(done, "compacted "+uri+": generation 1, 4 keys") {
		t.Fatalf("compact: %v, printed %q", err, done)
	}
	table, _, err = run(t, nil, "topic", "compaction", uri, "--server", url)
	if err != nil || !strings.Contains(table, "generation 1") || !strings.Contains(table, "4 keys") || !strings.Contains(table, "HORIZON") {
		t.Fatalf("compaction table after a compaction: %v\n%s", err, table)
	}
}
