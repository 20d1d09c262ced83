package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/topology"
)

// A fixed topic's table has a PARTITION column; a partition that moved
// shows its two segments with the same partition; a scalable topic's
// table has no such column.
func TestPrintLayoutPartitions(t *testing.T) {
	l, err := topology.NewFixed(2)
	if err != nil {
		t.Fatal(err)
	}
	l, err = l.WithOwner("n1").Relocate([]topology.SegmentID{1}, "n2")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printLayout(&out, actors.Describe("topic://t/ns/legacy", l))
	text := out.String()
	if !strings.HasPrefix(text, "persistent://t/ns/legacy") || !strings.Contains(text, "PARTITION") {
		t.Fatalf("fixed topic's table:\n%s", text)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	rows := map[string]string{}
	for _, line := range lines[3:] {
		f := strings.Fields(line)
		rows[f[0]] = f[len(f)-1]
	}
	if rows["0"] != "0" || rows["1"] != "1" || rows["2"] != "1" {
		t.Fatalf("partitions by segment %v in:\n%s", rows, text)
	}

	scalable, _ := topology.New(2, 0)
	out.Reset()
	printLayout(&out, actors.Describe("topic://t/ns/orders", scalable))
	if strings.Contains(out.String(), "PARTITION") {
		t.Fatalf("scalable topic's table:\n%s", out.String())
	}
}

// A replicated topic's table names each segment's copies, its leader (the
// owner) first and starred; a topic of one copy has no such column.
func TestPrintLayoutReplicas(t *testing.T) {
	l, err := topology.New(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	l = l.WithOwner("n2")
	d := actors.Describe("topic://t/ns/r3", l)
	var out bytes.Buffer
	printLayout(&out, d)
	if strings.Contains(out.String(), "REPLICAS") {
		t.Fatalf("a topic of one copy:\n%s", out.String())
	}
	d.Segments[0].Replicas = []api.ReplicaInfo{{Node: "n2", Incarnation: "a"}, {Node: "n3", Incarnation: "b"}, {Node: "n1", Incarnation: "c"}}
	out.Reset()
	printLayout(&out, d)
	if !strings.Contains(out.String(), "REPLICAS") || !strings.Contains(out.String(), "n2*,n3,n1") {
		t.Fatalf("a replicated topic:\n%s", out.String())
	}
}
