package node

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/braidmq/braid/api"
)

// docs/metrics.md's table names every braid_ metric a node exports (after
// a produce and a fetch, so that labelled ones have a series): a metric
// added without a row fails here.
func TestDocsListEveryMetric(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/m"}, nil)
	produce(t, nc, "m", "k", []byte("x"))
	fetchAll(t, nc, "m", "s", "c")
	resp, err := http.Get("http://" + n.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	readme, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^# HELP (braid_\w+) `).FindAllStringSubmatch(string(body), -1)
	if len(names) < 40 {
		t.Fatalf("only %d braid_ metrics exported?", len(names))
	}
	for _, m := range names {
		if !strings.Contains(string(readme), "`"+m[1]+"`") {
			t.Errorf("docs/metrics.md's table lacks %s", m[1])
		}
	}
}
