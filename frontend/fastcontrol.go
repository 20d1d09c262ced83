package frontend

import (
	"encoding/json"
	"time"

	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go/micro"
)

// The micro-service protocol answers of the fast produce front-end: the
// same documents nats.go's micro package sends, built from micro's own
// types.

func (f *fastProduce) identity() micro.ServiceIdentity {
	return micro.ServiceIdentity{Name: produceServiceName, ID: f.id, Version: api.ServiceVersion, Metadata: map[string]string{}}
}

func (f *fastProduce) ping() micro.Ping {
	return micro.Ping{ServiceIdentity: f.identity(), Type: micro.PingResponseType}
}

func (f *fastProduce) endpoints() []struct {
	name, subject string
	stats         *endpointStats
} {
	return []struct {
		name, subject string
		stats         *endpointStats
	}{
		{"produce", api.ProducePrefix + ".*.*.*", &f.one},
		{"produce-batch", api.ProduceBatchPrefix + ".*.*.*", &f.batch},
		{"produce-multi", api.ProduceMultiPrefix + ".*", &f.multi},
	}
}

func (f *fastProduce) info() micro.Info {
	info := micro.Info{ServiceIdentity: f.identity(), Type: micro.InfoResponseType,
		Description: "Braid produce: one message or a batch to a scalable topic, or batches to many topics of a tenant"}
	for _, e := range f.endpoints() {
		info.Endpoints = append(info.Endpoints, micro.EndpointInfo{Name: e.name, Subject: e.subject, QueueGroup: produceQueueGroup})
	}
	return info
}

func (f *fastProduce) stats() micro.Stats {
	st := micro.Stats{ServiceIdentity: f.identity(), Type: micro.StatsResponseType, Started: f.started, Endpoints: []*micro.EndpointStats{}}
	for _, e := range f.endpoints() {
		es := &micro.EndpointStats{Name: e.name, Subject: e.subject, QueueGroup: produceQueueGroup,
			NumRequests: int(e.stats.requests.Load()), NumErrors: int(e.stats.errors.Load()),
			ProcessingTime: time.Duration(e.stats.nanos.Load())}
		if es.NumRequests > 0 {
			es.AverageProcessingTime = es.ProcessingTime / time.Duration(es.NumRequests)
		}
		if last := e.stats.lastErr.Load(); last != nil {
			es.LastError = *last
		}
		st.Endpoints = append(st.Endpoints, es)
	}
	return st
}

func marshalJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
