package node

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// TestShutdownAnswersWhatItTook closes a node while a plain client
// pipelines produce requests at it: every request the server had received
// before Close began gets an answer, its result or UNAVAILABLE (or, once
// the produce endpoints stopped taking, NATS's no-responders status), and
// no request is told its topic does not exist.
func TestShutdownAnswersWhatItTook(t *testing.T) {
	for name, configure := range frontEnds {
		t.Run(name, func(t *testing.T) {
			n, nc := startNodeWith(t, t.TempDir(), configure)
			defer nc.Close()
			const uri = "topic://public/default/closing"
			mustAdmin(t, nc, api.AdminTopicCreate, map[string]any{"topic": uri, "segments": 4}, nil)
			subject := api.TopicSubject(api.ProducePrefix, "public", "default", "closing")

			const window = 512
			inbox := nats.NewInbox()
			var mu sync.Mutex
			answered := map[int]string{} // request -> "ok", a code symbol, or "no responders"
			slots := make(chan struct{}, window)
			var handled atomic.Uint64
			baseline := nc.Stats().InMsgs
			sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
				defer handled.Add(1)
				i, _ := strconv.Atoi(m.Subject[len(inbox)+1:])
				outcome := "ok"
				switch {
				case m.Header.Get("Status") == "503":
					outcome = "no responders"
				case m.Header.Get(micro.ErrorCodeHeader) != "":
					outcome = api.ParseError(m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)).Code.Symbol
				}
				mu.Lock()
				answered[i] = outcome
				mu.Unlock()
				select {
				case <-slots:
				default:
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			var sent atomic.Int64
			stop := make(chan struct{})
			sending := make(chan struct{})
			go func() {
				defer close(sending)
				for i := 0; ; i++ {
					select {
					case slots <- struct{}{}:
					case <-stop:
						return
					case <-time.After(5 * time.Second):
						return
					}
					m := &nats.Msg{Subject: subject, Reply: inbox + "." + strconv.Itoa(i), Data: []byte("x"),
						Header: nats.Header{api.HeaderKey: []string{strconv.Itoa(i % 100)}}}
					if nc.PublishMsg(m) != nil {
						return
					}
					sent.Store(int64(i + 1))
				}
			}()
			var got int
			if !poll.Until(20*time.Second, func() bool {
				mu.Lock()
				got = len(answered)
				mu.Unlock()
				return got >= 5000
			}) {
				t.Fatalf("only %d answers before the shutdown", got)
			}
			// Everything published before this flush has reached the
			// server by the time Close starts; the client keeps sending.
			barrier := int(sent.Load())
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := n.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			close(stop)
			<-sending
			// The replies the connection received may still wait for the
			// subscription's handler.
			if !poll.Until(20*time.Second, func() bool { return handled.Load() >= nc.Stats().InMsgs-baseline }) {
				t.Fatalf("handled %d of %d replies received", handled.Load(), nc.Stats().InMsgs-baseline)
			}
			mu.Lock()
			defer mu.Unlock()
			counts := map[string]int{}
			for i, outcome := range answered {
				counts[outcome]++
				if outcome != "ok" && outcome != api.CodeUnavailable.Symbol && outcome != "no responders" {
					t.Errorf("request %d answered %s", i, outcome)
				}
			}
			missing := 0
			first, last := -1, -1
			for i := range barrier {
				if _, ok := answered[i]; !ok {
					missing++
					if first < 0 {
						first = i
					}
					last = i
				}
			}
			if missing > 0 {
				t.Logf("missing %d..%d", first, last)
			}
			if missing > 0 {
				t.Fatalf("%d of the %d requests the server had before Close began were never answered (answers: %v)", missing, barrier, counts)
			}
			t.Logf("%d sent, %d before Close; answers: %v", sent.Load(), barrier, counts)
		})
	}
}
