package labels

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/braidmq/braid/internal/poll"
)

// A mailbox run carries the actor's labels, not its sender's: a goroutine
// profile taken while it runs shows them.
func TestDispatcherLabelsTheMailboxRun(t *testing.T) {
	d := Dispatcher("braid_topic", "topic://t/n/labelled", "braid_unit", "3/1")
	running, release := make(chan struct{}), make(chan struct{})
	pprof.Do(context.Background(), pprof.Labels("braid_sender", "the sender"), func(context.Context) {
		d.Schedule(func() {
			close(running)
			<-release
		})
	})
	<-running
	defer close(release)
	var profile string
	poll.Eventually(t, 10*time.Second, "a goroutine labelled as the actor", func() bool {
		var b bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		profile = b.String()
		return strings.Contains(profile, `"braid_topic":"topic://t/n/labelled"`)
	})
	for _, line := range strings.Split(profile, "\n") {
		if strings.Contains(line, "topic://t/n/labelled") && (!strings.Contains(line, `"braid_unit":"3/1"`) || strings.Contains(line, "braid_sender")) {
			t.Fatalf("the run's labels: %s", line)
		}
	}
	if d.Throughput() != throughput {
		t.Fatalf("throughput %d", d.Throughput())
	}
}
