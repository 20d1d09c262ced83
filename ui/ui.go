// Package ui serves Braid's web page (/ui on the metrics listener): each
// topic's DAG of segments, live. The page is embedded (no CDN): HTML, one
// script and one style sheet under assets/. Its data comes from the same
// NATS requests any client makes (topic.list, topic.describe, topic.stats,
// subscription.list) and the layout push, sent to the page as server-sent
// events: a "layout" event at once and at every change of the topic's
// layout, a "stats" event every second.
//
// The page shows everything to whoever reaches the metrics listener
// (127.0.0.1 by default): keep it there, or behind a proxy that
// authenticates.
package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/client"
	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go"
)

//go:embed assets
var assets embed.FS

// StatsInterval is how often the page gets a topic's stats.
const StatsInterval = time.Second

// maxTopics bounds the topics the page lists.
const maxTopics = 2000

// Handler serves the page under /ui/ with requests over nc.
func Handler(nc *nats.Conn) http.Handler {
	s := &server{nc: nc, adm: client.NewAdmin(nc, client.WithRequestTimeout(5*time.Second))}
	sub, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(sub)))
	mux.HandleFunc("GET /ui/api/topics", s.topics)
	mux.HandleFunc("GET /ui/api/topic", s.topic)
	mux.HandleFunc("GET /ui/api/watch", s.watch)
	return mux
}

type server struct {
	nc  *nats.Conn
	adm *client.Admin
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, err error) {
	http.Error(w, err.Error(), code)
}

// failRequest answers a failed request about a topic with the HTTP status
// of its error: 400 for a bad name or request, 404 for what does not
// exist, 403 for a forbidden one, 502 for the rest (Braid did not answer,
// or failed).
func failRequest(w http.ResponseWriter, err error) {
	status := http.StatusBadGateway
	var e *api.Error
	if errors.As(err, &e) {
		switch e.Code {
		case api.CodeBadRequest, api.CodeInvalidName, api.CodeInvalidArgument:
			status = http.StatusBadRequest
		case api.CodeNotFound, api.CodeTenantNotFound, api.CodeNamespaceMissing, api.CodeTopicNotFound, api.CodeTopicMigrated:
			status = http.StatusNotFound
		case api.CodeForbidden:
			status = http.StatusForbidden
		}
	}
	fail(w, status, err)
}

// topics lists every topic: tenants, their namespaces, their topics.
func (s *server) topics(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	tenants, err := s.adm.ListTenants(ctx)
	if err != nil {
		fail(w, http.StatusBadGateway, err)
		return
	}
	out := []string{}
	for _, t := range tenants {
		nss, err := s.adm.ListNamespaces(ctx, t)
		if err != nil {
			continue
		}
		for _, ns := range nss {
			_ = s.adm.ListTopicPages(ctx, ns, 0, func(page []string, _ int64) error {
				out = append(out, page...)
				if len(out) >= maxTopics {
					return errEnough
				}
				return nil
			})
			if len(out) >= maxTopics {
				break
			}
		}
	}
	writeJSON(w, api.NameListReply{Names: out})
}

var errEnough = fmt.Errorf("enough topics")

// snapshot is what the page shows of a topic besides its layout.
type snapshot struct {
	Time  int64           `json:"time"` // unix ms
	Stats api.TopicStats  `json:"stats"`
	Subs  json.RawMessage `json:"subscriptions,omitempty"`
}

func (s *server) snapshot(ctx context.Context, uri string) (snapshot, error) {
	st, err := s.adm.Stats(ctx, uri)
	if err != nil {
		return snapshot{}, err
	}
	snap := snapshot{Time: time.Now().UnixMilli(), Stats: st}
	// Lag per unit and per consumer, when the server has subscription.list.
	body, _ := json.Marshal(map[string]string{"topic": uri})
	if m, err := s.nc.RequestWithContext(ctx, api.AdminSubject("subscription.list"), body); err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
		snap.Subs = m.Data
	}
	return snap, nil
}

// topic answers one topic's layout and snapshot.
func (s *server) topic(w http.ResponseWriter, r *http.Request) {
	uri := r.URL.Query().Get("uri")
	if _, err := routing.ParseTopic(uri); err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("uri: %s", api.UserMessage(err.Error())))
		return
	}
	d, err := s.adm.DescribeTopic(r.Context(), uri)
	if err != nil {
		failRequest(w, err)
		return
	}
	snap, err := s.snapshot(r.Context(), uri)
	if err != nil {
		failRequest(w, err)
		return
	}
	writeJSON(w, map[string]any{"layout": d, "snapshot": snap})
}

// watch streams a topic's layout at every change and its snapshot every
// StatsInterval, as server-sent events, until the page goes.
func (s *server) watch(w http.ResponseWriter, r *http.Request) {
	uri := r.URL.Query().Get("uri")
	name, err := routing.ParseTopic(uri)
	if err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("uri: %s", api.UserMessage(err.Error())))
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		fail(w, http.StatusInternalServerError, fmt.Errorf("streaming unsupported"))
		return
	}
	layouts := make(chan []byte, 16)
	sub, err := s.nc.Subscribe(api.TopicSubject(api.LayoutPrefix, name.Tenant, name.Namespace, name.Name), func(m *nats.Msg) {
		select {
		case layouts <- m.Data:
		default: // the page is slow: the next push or describe catches up
		}
	})
	if err != nil {
		fail(w, http.StatusBadGateway, err)
		return
	}
	defer sub.Unsubscribe()
	ctx := r.Context()
	d, err := s.adm.DescribeTopic(ctx, uri)
	if err != nil {
		failRequest(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	send := func(event string, data []byte) bool {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	b, _ := json.Marshal(d)
	if !send("layout", b) {
		return
	}
	tick := time.NewTicker(StatsInterval)
	defer tick.Stop()
	for {
		if snap, err := s.snapshot(ctx, uri); err == nil {
			b, _ := json.Marshal(snap)
			if !send("stats", b) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case b := <-layouts:
			if !send("layout", b) {
				return
			}
		case <-tick.C:
		}
	}
}
