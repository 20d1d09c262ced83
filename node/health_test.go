package node

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// /healthz answers while the process runs, /readyz while the node takes
// requests (503 saying why otherwise), and /metrics carries
// braid_build_info with the build's version.
func TestHealthReadyAndBuildInfo(t *testing.T) {
	n, nc := startNodeWith(t, t.TempDir(), func(c *Config) { c.Version = "v9.9.9-test" })
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + n.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz of a running node: %d %q", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `braid_build_info{go_version="go`) || !strings.Contains(body, `version="v9.9.9-test"} 1`) {
		t.Fatalf("no braid_build_info in /metrics")
	}
	// Not connected to NATS any more: not ready.
	nc.Close()
	n.nc.Close()
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "not connected") {
		t.Fatalf("/readyz without NATS: %d %q", code, body)
	}
	stopNode(t, n, nil)
}
