package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	braidnode "github.com/braidmq/braid/node"
	"github.com/braidmq/braid/ui"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
)

// chromium finds the browser `make test` installs (Debian's chromium).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: `make test-ui` (and `make test`) install it with apt-get install chromium")
	return ""
}

// The page in a real headless browser: it lists the topic, draws its
// segment, and when the topic splits the two new segments appear (the
// layout push reaches the page), with the units table filled from stats.
func TestPageShowsASplitLive(t *testing.T) {
	node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		MetricsListen: "127.0.0.1:0", UI: ui.Handler, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	adm := client.NewAdmin(nc)
	const uri = "topic://public/default/watched"
	if _, err := adm.CreateTopic(ctx, uri, 1); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	page := "http://" + node.MetricsAddr() + "/ui/?topic=" + uri
	if err := chromedp.Do(bctx,
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`g[data-segment="0"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#topics a`)),
	); err != nil {
		t.Fatalf("loading %s: %v", page, err)
	}
	topics, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#topics`)))
	if err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#title`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(topics, uri) || title != uri {
		t.Fatalf("topic list %q, title %q", topics, title)
	}
	if _, err := adm.Split(ctx, uri, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx,
		chromedp.WaitVisible(chromedp.CSS(`g[data-segment="1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`g[data-segment="2"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-unit="2/0"]`)),
	); err != nil {
		t.Fatalf("after the split: %v", err)
	}
	sealed, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector('g[data-segment="0"]').classList.contains('sealed')`))
	if err != nil {
		t.Fatal(err)
	}
	units, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#units tbody tr').length`))
	if err != nil {
		t.Fatal(err)
	}
	if !sealed || units < 3 {
		t.Fatalf("after the split: segment 0 sealed %v, %d unit rows", sealed, units)
	}

	// A stream consumer joins: the subscriptions table shows the units it
	// holds and its lag.
	jb, _ := json.Marshal(api.JoinRequest{Subscription: "audit", Consumer: "c1"})
	if _, err := nc.Request(api.ConsumeSubject(api.ConsumeJoin, "public", "default", "watched"), jb, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	held := `(() => { const r = document.querySelector('tr[data-subscription="audit"]');
		return !!r && /c1 \[\d+\/\d+( \d+\/\d+)*\]: lag \d+/.test(r.textContent); })()`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](held, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		subs, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#subs`)))
		t.Fatalf("the subscriptions table shows %q, want c1's units and lag: %v", subs, err)
	}

	// One key carries every append: the load table and the segment's box
	// name it once the scaler has measured it.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		subject := api.TopicSubject(api.ProducePrefix, "public", "default", "watched")
		for {
			select {
			case <-stop:
				return
			default:
			}
			m := nats.NewMsg(subject)
			m.Header.Set(api.HeaderKey, "the-hot-key")
			m.Data = []byte("x")
			_, _ = nc.RequestMsg(m, time.Second)
		}
	}()
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#load tr.hot`))); err != nil {
		t.Fatalf("no hot key shown: %v", err)
	}
	row, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#load tr.hot`)))
	if err != nil {
		t.Fatal(err)
	}
	label, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('g.hot text').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(row, "the-hot-key") || !strings.Contains(label, "hot key the-hot-key") {
		t.Fatalf("load row %q, segment label %q", row, label)
	}

	// A topic that does not exist: the page says why it shows nothing.
	missing := "http://" + node.MetricsAddr() + "/ui/?topic=topic://public/default/missing"
	says := `document.getElementById('status').textContent.includes('TOPIC_NOT_FOUND')`
	if _, err := chromedp.Run(bctx, chromedp.Navigate(missing)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](says, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		status, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#status`)))
		t.Fatalf("a missing topic: status %q: %v", status, err)
	}
}

// The page's endpoints answer bad input with 400 and a message, a topic
// that does not exist with 404 naming the code.
func TestEndpointsRefuseBadInput(t *testing.T) {
	node, err := braidnode.Start(context.Background(), braidnode.Config{DataDir: t.TempDir(), NATSListen: "127.0.0.1:-1",
		MetricsListen: "127.0.0.1:0", UI: ui.Handler, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	base := "http://" + node.MetricsAddr() + "/ui/api/"
	for _, c := range []struct {
		path   string
		status int
		says   string
	}{
		{"topic?uri=nonsense", http.StatusBadRequest, "uri: invalid name"},
		{"topic", http.StatusBadRequest, "uri: invalid name"},
		{"watch?uri=topic://public/default/bad%20name", http.StatusBadRequest, "uri: invalid name"},
		{"topic?uri=topic://public/default/missing", http.StatusNotFound, "TOPIC_NOT_FOUND"},
		{"watch?uri=topic://public/default/missing", http.StatusNotFound, "TOPIC_NOT_FOUND"},
		{"topic?uri=topic://nobody/default/missing", http.StatusNotFound, "NOT_FOUND"},
	} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) || strings.Contains(string(body), "braid/") {
			t.Errorf("GET %s: %d %q, want %d saying %q", c.path, resp.StatusCode, body, c.status, c.says)
		}
	}
}
