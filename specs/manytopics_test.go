package specs

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// manyTopics is the size of the many-topics spec: BRAID_SPEC_TOPICS, or
// 2,000 (what `make test` runs; `make many-topics-spec` runs 20,000).
func manyTopics() int {
	if n, err := strconv.Atoi(os.Getenv("BRAID_SPEC_TOPICS")); err == nil && n > 0 {
		return n
	}
	return 2000
}

// inParallel runs f(i) for i in [0, n) with up to width at once, and
// returns the first error.
func inParallel(n, width int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		first atomic.Pointer[error]
		next  atomic.Int64
	)
	for range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return nil
}

var _ = Describe("Many topics in one namespace", Ordered, func() {
	var s *server
	BeforeAll(func() { s = startServer(GinkgoT().TempDir()) })
	AfterAll(func() { s.stop() })

	It("creates them, takes a message on each, keeps them over a restart and serves them all back", func() {
		n := manyTopics()
		name := func(i int) string { return fmt.Sprintf("many-%06d", i) }
		req := func(subject string, body []byte, hdr nats.Header) ([]byte, error) {
			m, err := s.nc.RequestMsg(&nats.Msg{Subject: subject, Data: body, Header: hdr}, 30*time.Second)
			if err != nil {
				return nil, err
			}
			if e := api.ParseError(m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)); e != nil {
				return nil, e
			}
			return m.Data, nil
		}
		began := time.Now()
		Expect(inParallel(n, 64, func(i int) error {
			b, _ := json.Marshal(api.TopicCreateRequest{Topic: "topic://public/default/" + name(i), Segments: 1, Buckets: 1})
			_, err := req(api.AdminSubject(api.AdminTopicCreate), b, nil)
			return err
		})).To(Succeed())
		created := time.Since(began)
		began = time.Now()
		Expect(inParallel(n, 64, func(i int) error {
			_, err := req(api.TopicSubject(api.ProducePrefix, "public", "default", name(i)), []byte("payload of "+name(i)),
				nats.Header{api.HeaderKey: []string{"k"}})
			return err
		})).To(Succeed())
		produced := time.Since(began)

		s.restart()
		began = time.Now()
		var got atomic.Int64
		Expect(inParallel(n, 64, func(i int) error {
			b, _ := json.Marshal(api.ReadRequest{Units: []api.ReadUnit{{Segment: 0, Bucket: 0, Offset: 0}}, Max: 10})
			data, err := req(api.ReadSubject(api.ReadFetch, "public", "default", name(i)), b, nil)
			if err != nil {
				return fmt.Errorf("read %s: %w", name(i), err)
			}
			r, err := api.DecodeReadReply(data)
			if err != nil {
				return err
			}
			if len(r.Messages) != 1 || string(r.Messages[0].Payload) != "payload of "+name(i) {
				return fmt.Errorf("%s holds %d messages after the restart, want its one (unit %+v)", name(i), len(r.Messages), r.Units)
			}
			got.Add(1)
			return nil
		})).To(Succeed())
		Expect(got.Load()).To(BeEquivalentTo(n))
		GinkgoWriter.Printf("%d topics: created in %s, one message each in %s, read back after a restart in %s\n",
			n, created.Round(time.Millisecond), produced.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

		var list api.TopicListReply
		s.admin(api.AdminTopicList, map[string]any{"namespace": "public/default", "limit": 10}, &list)
		Expect(list.Count).To(BeNumerically(">=", n))
		Expect(list.Topics).To(HaveLen(10))
	})
})
