package cluster

import (
	"strings"
	"sync/atomic"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

// produceMulti serves a produce-multi request of tenant (api.MultiPart):
// each part is appended to its topic as a produce-batch request would be,
// in part order, and done gets the part replies once every part is
// answered. resolve finds a part's topic (the front-ends cache them). It
// returns the error of a request that fails as a whole (done is then not
// called).
func produceMulti(tenant string, body []byte, resolve func(routing.TopicName) (*actors.Topic, error), done func([]api.MultiReply)) error {
	parts, err := api.DecodeMulti(body)
	if err != nil {
		return api.Errorf(api.CodeBadRequest, "%v", err)
	}
	replies := make([]api.MultiReply, len(parts))
	// One more than the parts: the loop's own, so that parts answered
	// while it runs cannot finish the request before every part is in.
	var left atomic.Int64
	left.Store(int64(len(parts)) + 1)
	finish := func() {
		if left.Add(-1) == 0 {
			done(replies)
		}
	}
	for i, part := range parts {
		t, err := resolvePart(tenant, part, resolve)
		var recs []api.Record
		if err == nil {
			if recs, err = api.DecodeRecords(part.Records); err != nil {
				err = api.Errorf(api.CodeBadRequest, "part %d (%s/%s): %v", i, part.Namespace, part.Topic, err)
			}
		}
		if err != nil {
			replies[i].Err = api.AsError(err)
			finish()
			continue
		}
		t.ProduceAt(recs, part.Epoch, func(res []api.Result) {
			replies[i].Results = res
			finish()
		})
	}
	finish()
	return nil
}

func resolvePart(tenant string, part api.MultiPart, resolve func(routing.TopicName) (*actors.Topic, error)) (*actors.Topic, error) {
	name, err := routing.TopicFromSubjectTokens(tenant, part.Namespace, part.Topic)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidName, "%v", err)
	}
	return resolve(name)
}

// multiTenant returns the tenant token of a produce-multi subject.
func multiTenant(subject string) (string, error) {
	tenant, ok := strings.CutPrefix(subject, api.ProduceMultiPrefix+".")
	if !ok || tenant == "" || strings.Contains(tenant, ".") {
		return "", api.Errorf(api.CodeBadRequest, "subject %q must be %s.<tenant>", subject, api.ProduceMultiPrefix)
	}
	return tenant, nil
}

// multiFailures returns the errors of a produce-multi request's parts and
// records, for a request nobody can be told of (no reply subject).
func multiFailures(replies []api.MultiReply) []error {
	var errs []error
	for _, r := range replies {
		if r.Err != nil {
			errs = append(errs, r.Err)
			continue
		}
		for _, res := range r.Results {
			if err := res.Err(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// encodeMultiReplies encodes a produce-multi reply.
func encodeMultiReplies(replies []api.MultiReply) []byte {
	return api.AppendMultiReplies(make([]byte, 0, 16+len(replies)*24), replies)
}
