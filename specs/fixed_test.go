package specs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Fixed-partition topics (persistent://), and their migration in place
// into scalable topics, after Pulsar's V5MigrationEndToEndTest.

const fixedURI = "persistent://public/default/legacy"

// adminErr sends an admin request and returns its error.
func (s *server) adminErr(op string, req any) error {
	b, err := json.Marshal(req)
	Expect(err).NotTo(HaveOccurred())
	_, err = s.request(api.AdminSubject(op), b)
	return err
}

// produceTo sends one message with headers and returns its reply or error.
func (s *server) produceTo(topic string, h nats.Header, payload string) (map[string]uint64, error) {
	m, err := s.nc.RequestMsg(&nats.Msg{Subject: api.TopicSubject(api.ProducePrefix, "public", "default", topic), Header: h, Data: []byte(payload)}, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if e := api.ParseError(m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error")); e != nil {
		return nil, e
	}
	var out map[string]uint64
	Expect(json.Unmarshal(m.Data, &out)).To(Succeed())
	return out, nil
}

// logFiles maps every file under a topic's unit directories of segment
// ids to its inode.
func logFiles(dir string, segments ...int) map[string]uint64 {
	out := map[string]uint64{}
	for _, seg := range segments {
		files, _ := filepath.Glob(filepath.Join(dir, "topics", "public", "default", "legacy", "*", fmt.Sprintf("seg-%d", seg), "b-0", "*"))
		for _, f := range files {
			if info, err := os.Stat(f); err == nil && info.Mode().IsRegular() {
				out[f] = info.Sys().(*syscall.Stat_t).Ino
			}
		}
	}
	return out
}

var _ = Describe("Fixed-partition topics", func() {
	var s *server
	BeforeEach(func() {
		s = startServer(GinkgoT().TempDir())
		DeferCleanup(s.stop)
	})

	It("route keys by hash % N to visible partitions, take Braid-Partition, grow but never shrink, and refuse what only scalable topics do", func() {
		var d api.TopicDescription
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: fixedURI, Partitions: 4}, &d)
		Expect(d.Topic).To(Equal(fixedURI))
		Expect(d.Segments).To(HaveLen(4))
		for i, seg := range d.Segments {
			Expect(seg.Partition).NotTo(BeNil())
			Expect(*seg.Partition).To(Equal(i))
			Expect(seg.State).To(Equal("active"))
		}
		var recs []api.Record
		for i := range 40 {
			recs = append(recs, api.Record{Key: []byte("k" + strconv.Itoa(i)), Payload: []byte("v")})
		}
		for i, r := range s.produceBatch("legacy", recs) {
			Expect(r.Segment).To(Equal(uint64(routing.FixedPartition(routing.KeyHash(recs[i].Key), 4))), "the partition is hash %% 4")
		}
		// A producer may name the partition.
		res, err := s.produceTo("legacy", nats.Header{api.HeaderPartition: []string{"2"}, api.HeaderKey: []string{"k0"}}, "named")
		Expect(err).NotTo(HaveOccurred())
		Expect(res["segment"]).To(Equal(uint64(2)))
		_, err = s.produceTo("legacy", nats.Header{api.HeaderPartition: []string{"9"}}, "nowhere")
		Expect(api.AsError(err)).To(HaveField("Code", api.CodeInvalidArgument))
		// What only scalable topics do is refused.
		zero := uint64(0)
		Expect(api.AsError(s.adminErr(api.AdminTopicSplit, api.SplitRequest{Topic: fixedURI, Segment: &zero}))).To(HaveField("Code", api.CodeLayoutRefused))
		Expect(api.AsError(s.adminErr(api.AdminTopicCreate, api.TopicCreateRequest{Topic: "persistent://public/default/other", Segments: 2}))).To(HaveField("Code", api.CodeInvalidArgument))
		Expect(api.AsError(s.adminErr(api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/other", Partitions: 2}))).To(HaveField("Code", api.CodeInvalidArgument))
		// Growing remaps keys; shrinking is refused.
		s.admin(api.AdminTopicPartitions, api.PartitionsRequest{Topic: fixedURI, Partitions: 6}, &d)
		Expect(d.Segments).To(HaveLen(6))
		Expect(api.AsError(s.adminErr(api.AdminTopicPartitions, api.PartitionsRequest{Topic: fixedURI, Partitions: 3}))).To(HaveField("Code", api.CodeLayoutRefused))
		for i, r := range s.produceBatch("legacy", recs) {
			Expect(r.Segment).To(Equal(uint64(routing.FixedPartition(routing.KeyHash(recs[i].Key), 6))), "the partition is hash %% 6 now")
		}
		// A stream subscription reads every partition.
		s.consume(api.ConsumeJoin, "legacy", api.JoinRequest{Subscription: "all", Consumer: "c"})
		var got []api.Message
		Eventually(func() int {
			msgs := s.fetch("legacy", "all", "c", 1000)
			got = append(got, msgs...)
			s.ackAll("legacy", "all", "c", msgs)
			return len(got)
		}).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(81))
		// So do a queue consumer and a checkpoint consumer.
		q := queueConsumer(s.nc, fixedURI, "q")
		cp, err := client.NewCheckpointConsumer(s.nc, fixedURI)
		Expect(err).NotTo(HaveOccurred())
		defer cp.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for range 81 {
			m, err := q.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
			m.Ack()
			_, err = cp.Next(ctx)
			Expect(err).NotTo(HaveOccurred())
		}
		// The scalable name of a fixed topic is not an error (subjects
		// carry no scheme); the fixed name of a scalable one is.
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: "topic://public/default/elastic"}, nil)
		Expect(api.AsError(s.adminErr(api.AdminTopicDescribe, api.TopicRequest{Topic: "persistent://public/default/elastic"}))).To(HaveField("Code", api.CodeTopicNotFound))
	})

	It("migrates in place under load: no byte copied, each message once, per key in order, the old subscription's positions kept, the old name answering TOPIC_MIGRATED", func() {
		s.admin(api.AdminTopicCreate, api.TopicCreateRequest{Topic: fixedURI, Partitions: 4}, nil)
		p, err := client.NewProducer(s.nc, fixedURI)
		Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const keys = 16
		send := func(from, to int) {
			for seq := from; seq < to; seq++ {
				rec := api.Record{Key: []byte("k" + strconv.Itoa(seq%keys)), Payload: []byte(strconv.Itoa(seq))}
				Expect(p.Send(ctx, rec, func(_ client.MessageID, err error) {
					defer GinkgoRecover()
					Expect(err).NotTo(HaveOccurred())
				})).To(Succeed())
			}
			Expect(p.Flush(ctx)).To(Succeed())
		}
		send(0, 400)
		// A subscription reads part of it before the migration.
		s.consume(api.ConsumeJoin, "legacy", api.JoinRequest{Subscription: "old", Consumer: "c"})
		seen := map[int]int{}
		last := map[string]int{}
		take := func(msgs []api.Message) {
			for _, m := range msgs {
				seq, err := strconv.Atoi(string(m.Payload))
				Expect(err).NotTo(HaveOccurred())
				seen[seq]++
				if prev, ok := last[string(m.Key)]; ok {
					Expect(seq).To(BeNumerically(">", prev), "key %s: %d after %d", m.Key, seq, prev)
				}
				last[string(m.Key)] = seq
			}
		}
		first := s.fetch("legacy", "old", "c", 150)
		Expect(first).NotTo(BeEmpty())
		take(first)
		s.ackAll("legacy", "old", "c", first)

		// A client naming a partition holds the migration back, unless
		// forced.
		_, err = s.produceTo("legacy", nats.Header{api.HeaderPartition: []string{"1"}}, "400") // unkeyed: no key's order to break
		Expect(err).NotTo(HaveOccurred())
		refused := s.adminErr(api.AdminTopicMigrate, api.MigrateRequest{Topic: fixedURI})
		Expect(api.AsError(refused)).To(HaveField("Code", api.CodeLayoutRefused))
		Expect(refused.Error()).To(ContainSubstring("in the last 30s): 1;"))

		before := logFiles(s.dir, 0, 1, 2, 3)
		Expect(before).NotTo(BeEmpty())
		// Migrate while the producer keeps going.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			send(401, 1200)
		}()
		var d api.TopicDescription
		s.admin(api.AdminTopicMigrate, api.MigrateRequest{Topic: fixedURI, Force: true}, &d)
		wg.Wait()
		send(1200, 1400)
		Expect(p.Close(ctx)).To(Succeed())
		Expect(d.Topic).To(Equal("topic://public/default/legacy"))
		active := 0
		for _, seg := range d.Segments {
			if seg.ID < 4 {
				Expect(seg.State).To(Equal("sealed"), "partition %d", seg.ID)
				Expect(seg.Children).To(HaveLen(4))
			} else if seg.State == "active" {
				active++
				Expect(seg.Parents).To(Equal([]uint64{0, 1, 2, 3}))
			}
		}
		Expect(active).To(Equal(4))
		// No byte copied or renamed: every file of the partitions is the
		// same file.
		after := logFiles(s.dir, 0, 1, 2, 3)
		for f, ino := range before {
			Expect(after).To(HaveKeyWithValue(f, ino), "partition log %s", f)
		}
		Expect(api.AsError(s.adminErr(api.AdminTopicDescribe, api.TopicRequest{Topic: fixedURI}))).To(HaveField("Code", api.CodeTopicMigrated))

		// The old subscription goes on from where it was, across a
		// restart half-way: every message once, per key in production
		// order.
		more := s.fetch("legacy", "old", "c", 300)
		take(more)
		s.ackAll("legacy", "old", "c", more)
		s.restart()
		s.consume(api.ConsumeJoin, "legacy", api.JoinRequest{Subscription: "old", Consumer: "c"}) // a restart forgets live consumers
		Eventually(func() int {
			msgs := s.fetch("legacy", "old", "c", 1000)
			take(msgs)
			s.ackAll("legacy", "old", "c", msgs)
			return len(seen)
		}).WithTimeout(20 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(1400))
		for seq, n := range seen {
			Expect(n).To(Equal(1), "seq %d read %d times", seq, n)
		}

		// And a new subscription from the start: the same.
		seen, last = map[int]int{}, map[string]int{}
		s.consume(api.ConsumeJoin, "legacy", api.JoinRequest{Subscription: "new", Consumer: "c"})
		Eventually(func() int {
			msgs := s.fetch("legacy", "new", "c", 1000)
			take(msgs)
			s.ackAll("legacy", "new", "c", msgs)
			return len(seen)
		}).WithTimeout(20 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(1400))
	})
})
