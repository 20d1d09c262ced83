package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
)

func rawPolicies(t *testing.T, js string) *api.Policies {
	t.Helper()
	var p api.Policies
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestPolicyEndpoints(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	const uri = "topic://public/default/pol"
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri,
		Policies: rawPolicies(t, `{"split_window":"2s","max_segments":8}`)}, nil)

	var got api.PoliciesReply
	mustAdmin(t, nc, api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri}, &got)
	if *got.Policies.SplitWindow != "2s" || got.Policies.MergeWindow != nil {
		t.Errorf("stored policies: %+v", got.Policies)
	}
	if *got.Effective.SplitWindow != "2s" || *got.Effective.MergeWindow != "1m0s" || *got.Effective.MaxSegments != 8 ||
		*got.Effective.Durability != "always" || *got.Effective.EntryBucketBudget != 4 {
		t.Errorf("effective policies: %s", got.Effective.String())
	}

	// Change live: set one key, unset another.
	got = api.PoliciesReply{}
	mustAdmin(t, nc, api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri,
		Policies: rawPolicies(t, `{"merge_window":"10s"}`), Unset: []string{"split_window"}}, &got)
	if got.Policies.SplitWindow != nil || *got.Policies.MergeWindow != "10s" || *got.Effective.SplitWindow != "3s" {
		t.Errorf("after the change: stored %+v, effective split window %s", got.Policies, *got.Effective.SplitWindow)
	}
	var d api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &d)
	if d.EffectivePolicies == nil || *d.EffectivePolicies.MergeWindow != "10s" || d.Policies == nil || *d.Policies.MaxSegments != 8 {
		t.Errorf("describe policies: %+v / %+v", d.Policies, d.EffectivePolicies)
	}

	// Refusals, each with a clear error and no change.
	refusals := []struct {
		op   string
		body string
		code api.Code
		text string
	}{
		{api.AdminTopicPolicies, `{"topic":"` + uri + `","policies":{"merge_msg_rate_in":20000}}`, api.CodeInvalidPolicy, "must be below split_msg_rate_in"},
		{api.AdminTopicPolicies, `{"topic":"` + uri + `","policies":{"split_window":"soon"}}`, api.CodeInvalidPolicy, "split_window"},
		{api.AdminTopicPolicies, `{"topic":"` + uri + `","policies":{"min_segments":9}}`, api.CodeInvalidPolicy, "above max_segments 8"},
		{api.AdminTopicPolicies, `{"topic":"` + uri + `","unset":["nope"]}`, api.CodeInvalidPolicy, `"nope" is not a policy`},
		{api.AdminTopicPolicies, `{"topic":"` + uri + `","policies":{"split_windw":"1s"}}`, api.CodeBadRequest, "split_windw"},
		{api.AdminTopicPolicies, `{"topic":"topic://public/default/missing"}`, api.CodeTopicNotFound, ""},
		{api.AdminNamespacePolicies, `{"namespace":"public/default","policies":{"min_segments":9}}`, api.CodeInvalidPolicy, "would not resolve"},
		{api.AdminNamespacePolicies, `{"namespace":"public/nowhere"}`, api.CodeNamespaceMissing, ""},
		{api.AdminNamespaceCreate, `{"namespace":"public/bad","policies":{"merge_msg_rate_out":60000}}`, api.CodeInvalidPolicy, "merge_msg_rate_out"},
		{api.AdminTopicCreate, `{"topic":"topic://public/default/bad","policies":{"evaluation_interval":"1ms"}}`, api.CodeInvalidPolicy, "evaluation_interval"},
	}
	for _, r := range refusals {
		_, _, e := request(t, nc, api.AdminSubject(r.op), []byte(r.body), nil)
		if e == nil || e.Code != r.code || !strings.Contains(e.Message, r.text) {
			t.Errorf("%s %s: %v, want %s mentioning %q", r.op, r.body, e, r.code.Symbol, r.text)
		}
	}
	got = api.PoliciesReply{}
	mustAdmin(t, nc, api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri}, &got)
	if *got.Effective.MergeWindow != "10s" || *got.Effective.MinSegments != 1 {
		t.Errorf("a refused change changed something: %s", got.Effective.String())
	}

	// Namespace policies apply live to its topics, under their own.
	var ns api.PoliciesReply
	mustAdmin(t, nc, api.AdminNamespacePolicies, api.NamespacePoliciesRequest{Namespace: "public/default",
		Policies: rawPolicies(t, `{"merge_window":"30s","split_cooldown":"9s"}`)}, &ns)
	if *ns.Policies.SplitCooldown != "9s" || *ns.Effective.SplitCooldown != "9s" {
		t.Errorf("namespace reply: %+v", ns)
	}
	got = api.PoliciesReply{}
	mustAdmin(t, nc, api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri}, &got)
	if *got.Effective.SplitCooldown != "9s" || *got.Effective.MergeWindow != "10s" {
		t.Errorf("after the namespace change: %s", got.Effective.String())
	}

	// The stored policies survive a restart.
	dir := n.cfg.DataDir
	stopNode(t, n, nc)
	n, nc = startNode(t, dir)
	defer stopNode(t, n, nc)
	got = api.PoliciesReply{}
	mustAdmin(t, nc, api.AdminTopicPolicies, api.TopicPoliciesRequest{Topic: uri}, &got)
	if *got.Effective.SplitCooldown != "9s" || *got.Effective.MergeWindow != "10s" || *got.Effective.MaxSegments != 8 {
		t.Errorf("after a restart: %s", got.Effective.String())
	}
}

// consistently polls cond every 20 ms for d and fails as soon as it does
// not hold. It waits for nothing: d is how long the property must hold.
func consistently(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("%s: stopped holding", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// produceFor sends keyed batches of size msgs every tick for d. Records
// refused with SEGMENT_SEALED (an automatic split sealed their segment
// while they were on the way) are resent, as the wire contract asks of a
// raw NATS producer; any other refusal fails the test.
func produceFor(t *testing.T, nc *nats.Conn, topic string, d, tick time.Duration, size int, keys int) int {
	t.Helper()
	sent := 0
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		recs := make([]api.Record, size)
		for i := range recs {
			recs[i] = api.Record{Key: []byte(fmt.Sprintf("k%d", (sent+i)%keys)), Payload: []byte("x")}
		}
		resendSealed(t, nc, topic, recs)
		sent += size
		time.Sleep(tick) // paces the producer: the workload, not a wait
	}
	return sent
}

// resendSealed produces recs as one batch and resends the ones refused with
// SEGMENT_SEALED until all are stored, for at most 10 s.
func resendSealed(t *testing.T, nc *nats.Conn, topic string, recs []api.Record) {
	t.Helper()
	var sealed error
	if !poll.Until(10*time.Second, func() bool {
		data, _, e := request(t, nc, api.TopicSubject(api.ProduceBatchPrefix, "public", "default", topic), api.AppendRecords(nil, recs), nil)
		if e != nil {
			t.Fatalf("produce: %v", e)
		}
		res, err := api.DecodeResults(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(recs) {
			t.Fatalf("%d results for %d records", len(res), len(recs))
		}
		var again []api.Record
		for i, r := range res {
			switch err := r.Err(); {
			case err == nil:
			case errors.Is(err, api.ErrSegmentSealed):
				again, sealed = append(again, recs[i]), err
			default:
				t.Fatalf("produce result: %v", err)
			}
		}
		recs = again
		return len(recs) == 0
	}) {
		t.Fatalf("produce result: %v", sealed)
	}
}

func activeSegments(t *testing.T, nc *nats.Conn, uri string) int {
	t.Helper()
	var d api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &d)
	n := 0
	for _, s := range d.Segments {
		if s.State == "active" {
			n++
		}
	}
	return n
}

func TestAutomaticSplitIsMeasuredAndCounted(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	const topic = "auto"
	const uri = "topic://public/default/" + topic
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Policies: rawPolicies(t,
		`{"split_msg_rate_in":200,"merge_msg_rate_in":1,"evaluation_interval":"50ms","split_window":"200ms","split_cooldown":"0s","max_segments":4}`)}, nil)
	produceFor(t, nc, topic, time.Second, 20*time.Millisecond, 40, 500)
	poll.Eventually(t, 10*time.Second, "an automatic split", func() bool { return activeSegments(t, nc, uri) > 1 })
	m := scrape(t, n)
	for _, want := range []string{
		`braid_scaling_operations_total{namespace="default",op="split",reason="msg_rate_in",tenant="public",topic="` + topic + `"}`,
		`braid_segment_messages_per_second{direction="in"`,
		`braid_active_segments{namespace="default",tenant="public",topic="` + topic + `"}`,
		`braid_bucket_reassignments_total`,
	} {
		if !contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "braid_"))
		}
	}
	if got := activeSegments(t, nc, uri); got > 4 {
		t.Errorf("%d segments, max 4", got)
	}
}

func TestRetentionDeletesDrainedSealedSegments(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	const topic = "ret"
	const uri = "topic://public/default/" + topic
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: uri, Policies: rawPolicies(t,
		`{"auto_scale":false,"retention":"0s","evaluation_interval":"50ms"}`)}, nil)
	for i := range 20 {
		produce(t, nc, topic, fmt.Sprintf("k%d", i), []byte("a"))
	}
	// A subscription that has not read segment 0 keeps it.
	jb, _ := json.Marshal(api.JoinRequest{Subscription: "late", Consumer: "c"})
	if _, _, e := request(t, nc, api.ConsumeSubject(api.ConsumeJoin, "public", "default", topic), jb, nil); e != nil {
		t.Fatal(e)
	}
	var d api.TopicDescription
	mustAdmin(t, nc, api.AdminTopicSplit, map[string]any{"topic": uri, "segment": 0}, &d)
	seg0 := filepath.Join(n.cfg.DataDir, "topics", "public", "default", topic, "seg-0")
	state := func() string {
		mustAdmin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: uri}, &d)
		return d.Segments[0].State
	}
	consistently(t, 300*time.Millisecond, "segment 0 kept while subscription late has not drained it",
		func() bool { return state() == "sealed" })
	if got := fetchAll(t, nc, topic, "late", "c"); len(got) != 20 {
		t.Fatalf("consumed %d of 20", len(got))
	}
	poll.Eventually(t, 10*time.Second, "segment 0 deleted", func() bool { return state() == "deleted" })
	poll.Eventually(t, 10*time.Second, "segment 0's logs removed", func() bool {
		_, err := os.Stat(seg0)
		return errors.Is(err, os.ErrNotExist)
	})
	if !contains(scrape(t, n), `braid_scaling_operations_total{namespace="default",op="delete",reason="retention",tenant="public",topic="`+topic+`"} 1`) {
		t.Errorf("no retention delete counted:\n%s", grep(scrape(t, n), "braid_scaling"))
	}
	// Still readable and writable after the delete.
	produce(t, nc, topic, "k1", []byte("b"))
	if got := fetchAll(t, nc, topic, "late", "c"); len(got) != 1 {
		t.Fatalf("after the delete: consumed %d, want 1", len(got))
	}
}
