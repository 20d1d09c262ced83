package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	braidnode "github.com/braidmq/braid/node"
	"github.com/braidmq/braid/topology"
)

// run runs the CLI with args, stdin in, and returns stdout, stderr and
// the error.
func run(t *testing.T, in io.Reader, args ...string) (string, string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	if in == nil {
		in = strings.NewReader("")
	}
	root.SetIn(in)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func startServer(t *testing.T) string {
	t.Helper()
	node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1", MetricsListen: "off",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	t.Setenv("NATS_URL", "")
	return node.ClientURL()
}

// Flags of a command group may come before its verb, help never connects,
// and a verb's help lists its own flags with their defaults.
func TestFlagsBeforeTheVerbAndHelp(t *testing.T) {
	url := startServer(t)
	if _, _, err := run(t, nil, "topic", "create", "topic://public/default/orders", "--segments", "2", "--server", url); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, nil, "topic", "--server", url, "list", "public/default")
	if err != nil || strings.TrimSpace(out) != "topic://public/default/orders" {
		t.Fatalf("--server before the verb: %q, %v", out, err)
	}
	const nowhere = "nats://127.0.0.1:1"
	out, _, err = run(t, nil, "topic", "-h", "--server", nowhere)
	if err != nil || !strings.Contains(out, "Available Commands") || !strings.Contains(out, "describe") {
		t.Fatalf("topic -h: %q, %v", out, err)
	}
	out, _, err = run(t, nil, "topic", "create", "-h", "--server", nowhere)
	if err != nil || !strings.Contains(out, "--segments int") || !strings.Contains(out, "(default 1)") || !strings.Contains(out, "--partitions") {
		t.Fatalf("topic create -h: %q, %v", out, err)
	}
	out, _, err = run(t, nil, "consume", "-h")
	if err != nil || strings.Contains(out, "-1ns") || !strings.Contains(out, "--ack-timeout") {
		t.Fatalf("consume -h: %q, %v", out, err)
	}
	// --output json on describe and list.
	out, _, err = run(t, nil, "topic", "describe", "topic://public/default/orders", "-o", "json", "--server", url)
	var d api.TopicDescription
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || len(d.Segments) != 2 {
		t.Fatalf("describe -o json: %q, %v", out, err)
	}
	if _, _, err := run(t, nil, "topic", "list", "public/default", "-o", "yaml", "--server", url); !isUsage(err) {
		t.Fatalf("-o yaml: %v", err)
	}
	// NATS_URL is the default server.
	t.Setenv("NATS_URL", url)
	if out, _, err := run(t, nil, "tenant", "list"); err != nil || !strings.Contains(out, "public") {
		t.Fatalf("tenant list through NATS_URL: %q, %v", out, err)
	}
}

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// Negative or zero counts and flags of another --kind are refused before
// anything is sent.
func TestRefusesValuesThatDoNotApply(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1") // nothing may connect
	for _, args := range [][]string{
		{"produce", "topic://public/default/t", "--count", "-5"},
		{"produce", "topic://public/default/t", "--count", "10", "--keys", "-1"},
		{"produce", "topic://public/default/t", "--count", "10", "--size", "-1"},
		{"produce", "topic://public/default/t", "--keys", "10"},
		{"produce", "topic://public/default/t", "--count", "10", "--key", "k"},
		{"produce", "topic://public/default/t", "--header", "novalue"},
		{"consume", "topic://public/default/t", "--count", "-1"},
		{"consume", "topic://public/default/t", "--kind", "checkpoint", "--subscription", "s"},
		{"consume", "topic://public/default/t", "--kind", "stream", "--max-deliveries", "5"},
		{"consume", "topic://public/default/t", "--kind", "queue", "--compacted"},
		{"consume", "topic://public/default/t", "--kind", "checkpoint", "--checkpoint", "X", "--start-time", "1"},
		{"consume", "topic://public/default/t", "--kind", "other"},
		{"consume", "topic://public/default/t", "--start", "middle"},
		{"topic", "create", "topic://public/default/t", "--segments", "0"},
		{"topic", "create", "topic://public/default/t", "--partitions", "3"},
		{"topic", "create", "persistent://public/default/t", "--segments", "3"},
		{"bench", "--messages", "0"},
	} {
		if _, _, err := run(t, nil, args...); !isUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// The server refuses "segments":0 said outright, as it refuses -1.
func TestServerRefusesZeroSegments(t *testing.T) {
	url := startServer(t)
	_, _, err := run(t, nil, "topic", "create", "topic://public/default/t", "--server", url) // the default: fine
	if err != nil {
		t.Fatal(err)
	}
	nc, err := (&clientFlags{server: url, cmd: newRoot()}).connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := nc.Request(api.AdminSubject(api.AdminTopicCreate), []byte(`{"topic":"topic://public/default/z","segments":0}`), 5e9)
	if err != nil || !strings.Contains(m.Header.Get("Nats-Service-Error"), "INVALID_ARGUMENT") {
		t.Fatalf("segments 0: %v %v", err, m.Header)
	}
}

// topic delete asks first; without a terminal it needs --force.
func TestDeleteNeedsConfirmation(t *testing.T) {
	url := startServer(t)
	if _, _, err := run(t, nil, "topic", "create", "topic://public/default/gone", "--server", url); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, strings.NewReader("y\n"), "topic", "delete", "topic://public/default/gone", "--server", url); !isUsage(err) {
		t.Fatalf("delete from a pipe without --force: %v", err)
	}
	if _, _, err := run(t, nil, "topic", "describe", "topic://public/default/gone", "--server", url); err != nil {
		t.Fatalf("the topic must still be there: %v", err)
	}
	if out, _, err := run(t, nil, "topic", "delete", "topic://public/default/gone", "--force", "--server", url); err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("delete --force: %q, %v", out, err)
	}
}

// produce reads lines of any length from stdin, with --header and --time.
func TestProduceLongLinesHeadersAndTime(t *testing.T) {
	url := startServer(t)
	if _, _, err := run(t, nil, "topic", "create", "topic://public/default/lines", "--server", url); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 300<<10) // bufio.Scanner's default would fail on it
	in := strings.NewReader("short\n" + long + "\nlast")
	if _, errOut, err := run(t, in, "produce", "topic://public/default/lines", "--header", "trace=abc", "--time", "1700000000000", "--server", url); err != nil {
		t.Fatalf("produce: %v (%s)", err, errOut)
	}
	out, _, err := run(t, nil, "consume", "topic://public/default/lines", "--count", "3", "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Unkeyed: round robin over the units, so any order across them.
	if len(lines) != 3 || !strings.Contains(out, "\tshort\ttrace=abc") || !strings.Contains(out, "\t"+long+"\ttrace=abc") || !strings.Contains(out, "\tlast\ttrace=abc") {
		t.Fatalf("consumed %d lines: %.200q", len(lines), out)
	}
}

// describe prints each segment under its parent, depth first.
func TestDescribeTreeOrder(t *testing.T) {
	l, err := topology.New(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []topology.SegmentID{0, 1, 2} {
		if l, err = l.Split(id, nil); err != nil {
			t.Fatal(err)
		}
	}
	m, err := l.Merge(4, 5) // children of 1 and 2, adjacent
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printLayout(&out, actors.Describe("topic://t/ns/x", m))
	var order []string
	for _, line := range strings.Split(out.String(), "\n")[3:] {
		if f := strings.Fields(line); len(f) > 0 {
			order = append(order, f[0])
		}
	}
	// 0 -> 1 -> 3, 4; 2 -> 5, 6; 7 = merge of 4 and 5, after both.
	want := []string{"0", "1", "3", "4", "2", "5", "7", "6"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("rows %v, want %v:\n%s", order, want, out.String())
	}
}

// message get prints one message by id; peek the first or last of a topic
// in time order, without a subscription.
func TestMessageGetAndPeek(t *testing.T) {
	url := startServer(t)
	if _, _, err := run(t, nil, "topic", "create", "topic://public/default/look", "--segments", "2", "--server", url); err != nil {
		t.Fatal(err)
	}
	// Unkeyed (round robin over the units), each at its own time: peek's
	// order across units is by time.
	for i := range 5 {
		in := strings.NewReader(fmt.Sprintf("m%d\n", i))
		if _, _, err := run(t, in, "produce", "topic://public/default/look", "--time", fmt.Sprint(1700000000000+i), "--server", url); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := run(t, nil, "message", "peek", "topic://public/default/look", "-n", "3", "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	first := strings.Split(strings.TrimSpace(out), "\n")
	if len(first) != 3 || !strings.HasSuffix(first[0], "\tm0") || !strings.HasSuffix(first[2], "\tm2") {
		t.Fatalf("peek first 3:\n%s", out)
	}
	out, _, err = run(t, nil, "message", "peek", "topic://public/default/look", "--last", "-n", "2", "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	lastTwo := strings.Split(strings.TrimSpace(out), "\n")
	if len(lastTwo) != 2 || !strings.HasSuffix(lastTwo[0], "\tm3") || !strings.HasSuffix(lastTwo[1], "\tm4") {
		t.Fatalf("peek last 2:\n%s", out)
	}
	// The id of m1, as peek printed it (time, then id), fetched by get.
	id := strings.Fields(first[1])[1]
	out, _, err = run(t, nil, "message", "get", "topic://public/default/look", id, "-o", "json", "--server", url)
	var got struct {
		Messages []api.JSONMessage `json:"messages"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got.Messages) != 1 || string(got.Messages[0].Payload) != "m1" {
		t.Fatalf("get %s: %q, %v", id, out, err)
	}
	if _, _, err := run(t, nil, "message", "get", "topic://public/default/look", "0/0/999", "--server", url); err == nil {
		t.Fatal("get of an offset not written: no error")
	}
	if _, _, err := run(t, nil, "message", "get", "topic://public/default/look", "0-0-1", "--server", url); !isUsage(err) {
		t.Fatalf("a malformed id: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer for a command running in another
// goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// topic watch prints the layout, then again when the topic splits.
func TestTopicWatchFollowsASplit(t *testing.T) {
	url := startServer(t)
	if _, _, err := run(t, nil, "topic", "create", "topic://public/default/w", "--server", url); err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"topic", "watch", "topic://public/default/w", "--changes", "2", "--interval", "100ms", "--server", url})
	done := make(chan error, 1)
	go func() { done <- root.Execute() }()
	if !poll.Until(30*time.Second, func() bool { return strings.Contains(out.String(), "epoch 1") }) {
		t.Fatalf("no first layout: %q", out.String())
	}
	if _, _, err := run(t, nil, "topic", "split", "topic://public/default/w", "0", "--server", url); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("watch did not print the split: %q", out.String())
	}
	text := out.String()
	second := text[strings.Index(text, "epoch 2"):]
	if !strings.Contains(second, "2 active segments") || !strings.Contains(second, "\n  1 ") || !strings.Contains(second, "\n  2 ") {
		t.Fatalf("the layout after the split:\n%s", second)
	}
}

// tenant and namespace create, list and delete; a delete of what is not
// empty is refused and changes nothing.
func TestTenantAndNamespaceLifecycle(t *testing.T) {
	url := startServer(t)
	steps := [][]string{
		{"tenant", "create", "acme"},
		{"namespace", "create", "acme/orders"},
		{"topic", "create", "topic://acme/orders/t"},
	}
	for _, s := range steps {
		if _, _, err := run(t, nil, append(s, "--server", url)...); err != nil {
			t.Fatalf("%v: %v", s, err)
		}
	}
	if _, _, err := run(t, nil, "tenant", "delete", "acme", "--server", url); err == nil || !strings.Contains(err.Error(), "delete them first") {
		t.Fatalf("delete of a tenant with a namespace: %v", err)
	}
	if _, _, err := run(t, nil, "namespace", "delete", "acme/orders", "--server", url); err == nil || !strings.Contains(err.Error(), "topic://acme/orders/t") {
		t.Fatalf("delete of a namespace with a topic: %v", err)
	}
	if out, _, _ := run(t, nil, "namespace", "list", "acme", "--server", url); strings.TrimSpace(out) != "acme/orders" {
		t.Fatalf("namespaces after the refusals: %q", out)
	}
	for _, s := range [][]string{{"topic", "delete", "topic://acme/orders/t", "--force"}, {"namespace", "delete", "acme/orders"}, {"tenant", "delete", "acme"}} {
		if _, _, err := run(t, nil, append(s, "--server", url)...); err != nil {
			t.Fatalf("%v: %v", s, err)
		}
	}
	if out, _, _ := run(t, nil, "tenant", "list", "--server", url); strings.Contains(out, "acme") {
		t.Fatalf("tenants after the delete: %q", out)
	}
}
