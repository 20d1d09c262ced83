package node

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/braidmq/braid/api"
)

// Every endpoint's requests land in braid_request_duration_seconds, by
// service and endpoint: admin (answered on another goroutine), the lean
// produce front-end, consume.
func TestRequestLatencyPerEndpoint(t *testing.T) {
	n, nc := startNode(t, t.TempDir())
	defer stopNode(t, n, nc)
	mustAdmin(t, nc, api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/lat"}, nil)
	for range 3 {
		produce(t, nc, "lat", "k", []byte("x"))
	}
	fetchAll(t, nc, "lat", "s", "c")
	_ = admin(t, nc, api.AdminTopicDescribe, api.TopicRequest{Topic: "topic://public/default/none"}, nil) // an error: counted too
	m := scrape(t, n)
	count := func(service, endpoint string) int {
		re := regexp.MustCompile(`braid_request_duration_seconds_count\{endpoint="` + endpoint + `",service="` + service + `"\} (\d+)`)
		got := re.FindStringSubmatch(m)
		if got == nil {
			return 0
		}
		v, _ := strconv.Atoi(got[1])
		return v
	}
	for _, c := range []struct {
		service, endpoint string
		least             int
	}{
		{"braid-admin", "topic-create", 1},
		{"braid-admin", "topic-describe", 1},
		{"braid-produce", "produce", 3},
		{"braid-consume", "fetch", 1},
		{"braid-consume", "join", 1},
	} {
		if got := count(c.service, c.endpoint); got < c.least {
			t.Errorf("%s %s: %d requests timed, want %d or more", c.service, c.endpoint, got, c.least)
		}
	}
}
