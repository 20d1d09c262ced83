package consumers

import (
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/clock"
)

// TestNoticeBoard: a notice refuses its consumer's requests with its error
// until the consumer leaves (answered OK) or the notice expires, after the
// consumer's session timeout and at least NoticeTTL; other consumers and
// other subscriptions are not concerned.
func TestNoticeBoard(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1000, 0))
	b := &noticeBoard{clock: clk}
	gone := api.Errorf(api.CodeNotFound, "deleted")
	b.add("topic://a/b/c", "s", "c1", time.Second, gone)
	b.add("topic://a/b/c", "s", "c2", 2*NoticeTTL, gone)

	answered := func(msg any) (bool, error) {
		var got error
		switch m := msg.(type) {
		case *Fetch:
			m.Reply = func(_ []api.Message, _ int, err error) { got = err }
		case *Join:
			m.Reply = func(_ api.JoinReply, err error) { got = err }
		case *Leave:
			m.Reply = func(err error) { got = err }
		}
		return b.intercept("topic://a/b/c", "s", msg), got
	}
	if ok, err := answered(&Fetch{Consumer: "c1"}); !ok || err != gone {
		t.Fatalf("fetch of c1: %v %v, want refused with the notice", ok, err)
	}
	if ok, err := answered(&Join{Consumer: "c1"}); !ok || err != gone {
		t.Fatalf("join of c1: %v %v, want refused with the notice", ok, err)
	}
	if ok, _ := answered(&Fetch{Consumer: "c3"}); ok {
		t.Fatal("a consumer without a notice was intercepted")
	}
	if b.intercept("topic://a/b/c", "other", &Fetch{Consumer: "c1"}) || b.intercept("topic://a/b/c", "s", &GetStats{}) {
		t.Fatal("another subscription, or a request of no consumer, was intercepted")
	}
	if ok, err := answered(&Leave{Consumer: "c1"}); !ok || err != nil {
		t.Fatalf("leave of c1: %v %v, want answered OK", ok, err)
	}
	if ok, _ := answered(&Fetch{Consumer: "c1"}); ok {
		t.Fatal("c1 still noticed after it left")
	}
	clk.Advance(NoticeTTL)
	if ok, _ := answered(&Fetch{Consumer: "c2"}); !ok {
		t.Fatal("c2's notice expired before its session timeout")
	}
	clk.Advance(NoticeTTL)
	if ok, _ := answered(&Fetch{Consumer: "c2"}); ok {
		t.Fatal("c2's notice outlived its session timeout")
	}
	if n := b.active.Load(); n != 0 {
		t.Fatalf("%d notices active, want none", n)
	}
}
