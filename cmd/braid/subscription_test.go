package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
)

// braid subscription list, seek and delete against a server: the table
// and JSON of list, a seek to earliest that gives the backlog back, and a
// delete that asks first.
func TestSubscriptionCommands(t *testing.T) {
	url := startServer(t)
	const uri = "topic://public/default/subs"
	if _, _, err := run(t, nil, "topic", "create", uri, "--buckets", "1", "--server", url); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, strings.NewReader("a\nb\nc\n"), "produce", uri, "--server", url); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, nil, "consume", uri, "--subscription", "audit", "--count", "3", "--quiet", "--server", url); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(t, nil, "subscription", "list", uri, "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if f := strings.Fields(lines[1]); len(f) < 4 || f[0] != "audit" || f[1] != "stream" || f[3] != "0" {
		t.Fatalf("list: want audit, a stream subscription with no backlog, in\n%s", out)
	}
	if !strings.Contains(out, "UNIT") || !strings.Contains(out, "0/0") {
		t.Fatalf("list: no unit table in\n%s", out)
	}

	out, _, err = run(t, nil, "subscription", "seek", uri, "audit", "--to", "earliest", "--server", url)
	if err != nil || !strings.Contains(out, "backlog 3") {
		t.Fatalf("seek --to earliest: %q, %v", out, err)
	}
	out, _, err = run(t, nil, "subscription", "list", uri, "-o", "json", "--server", url)
	var listed struct {
		Subscriptions []api.SubscriptionInfo `json:"subscriptions"`
	}
	if err != nil || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Subscriptions) != 1 ||
		listed.Subscriptions[0].Backlog != 3 || listed.Subscriptions[0].Units[0].Lag != 3 {
		t.Fatalf("list -o json after the seek: %q, %v", out, err)
	}
	if _, _, err := run(t, nil, "subscription", "seek", uri, "audit", "--message", "0/0/9", "--server", url); err == nil ||
		!strings.Contains(err.Error(), "INVALID_ARGUMENT") {
		t.Fatalf("seek past the unit's end: %v", err)
	}
	if _, _, err := run(t, nil, "subscription", "seek", uri, "audit", "--time", "1h", "--server", url); err != nil {
		t.Fatalf("seek --time 1h: %v", err)
	}

	if _, _, err := run(t, strings.NewReader("y\n"), "subscription", "delete", uri, "audit", "--server", url); !isUsage(err) {
		t.Fatalf("delete from a pipe without --yes: %v", err)
	}
	if _, _, err := run(t, nil, "subscription", "delete", uri, "nobody", "--yes", "--server", url); err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("delete of an unknown subscription: %v", err)
	}
	out, _, err = run(t, nil, "subscription", "delete", uri, "audit", "--yes", "--server", url)
	if err != nil || !strings.Contains(out, "deleted subscription audit") {
		t.Fatalf("delete --yes: %q, %v", out, err)
	}
	if out, _, err := run(t, nil, "subscription", "list", uri, "--server", url); err != nil || !strings.Contains(out, "no subscriptions") {
		t.Fatalf("list after the delete: %q, %v", out, err)
	}
}

// Seek flags are checked before anything is sent.
func TestSubscriptionSeekFlags(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1") // nothing may connect
	for _, args := range [][]string{
		{"subscription", "seek", "topic://public/default/t", "s"},
		{"subscription", "seek", "topic://public/default/t", "s", "--to", "earliest", "--time", "5"},
		{"subscription", "seek", "topic://public/default/t", "s", "--to", "middle"},
		{"subscription", "seek", "topic://public/default/t", "s", "--time", "-5"},
		{"subscription", "seek", "topic://public/default/t", "s", "--time", "yesterday"},
		{"subscription", "seek", "topic://public/default/t", "s", "--message", "1/2"},
		{"subscription", "seek", "topic://public/default/t", "s", "--message", "a/b/c"},
	} {
		if _, _, err := run(t, nil, args...); !isUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	now := time.UnixMilli(1_700_000_000_000)
	for in, want := range map[string]int64{"1700000000000": 1_700_000_000_000, "15m": now.Add(-15 * time.Minute).UnixMilli(),
		"2023-11-14T22:13:20Z": 1_700_000_000_000} {
		if got, err := parseSeekTime(in, now); err != nil || got.UnixMilli() != want {
			t.Errorf("parseSeekTime(%q) = %v, %v; want %d", in, got.UnixMilli(), err, want)
		}
	}
	if id, err := parseMessageID("3/1/42"); err != nil || id.Segment != 3 || id.Bucket != 1 || id.Offset != 42 {
		t.Errorf("parseMessageID(3/1/42) = %+v, %v", id, err)
	}
}
