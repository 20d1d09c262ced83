package frontend

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/braidmq/braid/actors"
	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
)

// produceMulti serves a produce-multi request of tenant (api.MultiPart):
// each part is appended to its topic as a produce-batch request would be,
// in part order, and done gets the part replies once every part is
// answered. resolve finds a part's topic (the front-ends cache them). It
// returns the error of a request that fails as a whole (done is then not
// called), and counts in refusals the refusals of parts and records it makes
// (not those in the replies of the owners it forwards parts to: they
// count their own).
//
// Parts of topics another node owns are sent to their owners (remote, nil
// when they may not be: the request was forwarded here already), one
// produce-multi per owner, and their replies put in their places.
func produceMulti(tenant string, body []byte, resolve func(routing.TopicName) (*actors.Topic, error), remote *Frontend, refusals *produceMetrics,
	done func([]api.MultiReply)) error {
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
	var owners []string           // in order of first part
	byOwner := map[string][]int{} // the parts of each owner
	for i, part := range parts {
		t, err := resolvePart(tenant, part, resolve)
		if owner, ok := notOwner(err); ok && remote != nil {
			if byOwner[owner] == nil {
				owners = append(owners, owner)
			}
			byOwner[owner] = append(byOwner[owner], i)
			continue
		}
		var recs []api.Record
		if err == nil {
			if recs, err = api.DecodeRecords(part.Records); err != nil {
				err = api.Errorf(api.CodeBadRequest, "part %d (%s/%s): %v", i, part.Namespace, part.Topic, err)
			}
		}
		if err != nil {
			replies[i].Err = api.AsError(movedRefusal(err))
			refusals.refused(replies[i].Err)
			finish()
			continue
		}
		t.ProduceAt(recs, part.Epoch, func(res []api.Result) {
			refusals.refusedRecords(res)
			replies[i].Results = res
			finish()
		})
	}
	for _, owner := range owners {
		idx := byOwner[owner]
		sub := api.AppendMultiHeader(nil, len(idx))
		for _, i := range idx {
			sub = api.AppendMultiPart(sub, parts[i].Namespace, parts[i].Topic, parts[i].Epoch, parts[i].Records)
		}
		remote.requestOwner(owner, tenant, sub, func(m *nats.Msg, err error) {
			var notSent notSentError
			if err == nil && noResponders(m) || errors.As(err, &notSent) {
				// Nobody took them (the owner is gone and its topic not
				// moved yet): say so, for the client to send them again.
				for _, i := range idx {
					replies[i].Err = errNoneTook
					refusals.refused(errNoneTook)
					finish()
				}
				return
			}
			var got []api.MultiReply
			if err == nil {
				if e := api.ParseError(m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)); e != nil {
					err = e
				} else if got, err = api.DecodeMultiReplies(m.Data); err == nil && len(got) != len(idx) {
					err = fmt.Errorf("%d part replies for %d parts", len(got), len(idx))
				}
			}
			for k, i := range idx {
				if err != nil {
					replies[i].Err = api.AsError(api.Errorf(api.CodeUnavailable, "part %d (%s/%s) forwarded to its owner: %v", i, parts[i].Namespace, parts[i].Topic, err))
					refusals.refused(replies[i].Err)
				} else {
					replies[i] = got[k]
				}
				finish()
			}
		})
	}
	finish()
	return nil
}

// errNoneTook marks the parts of a produce-multi that no node took: a
// request all of whose parts are so is answered with NATS's no-responders
// status, which tells the client that nothing was appended (noneTook).
var errNoneTook = api.Errorf(api.CodeUnavailable, "no node took these parts (their owner is gone and their topic not moved yet); send them again")

// noResponders reports whether m is NATS's no-responders status.
func noResponders(m *nats.Msg) bool {
	return m != nil && len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// noneTook reports whether no part of a produce-multi was taken.
func noneTook(replies []api.MultiReply) bool {
	for _, r := range replies {
		if r.Err != errNoneTook {
			return false
		}
	}
	return len(replies) > 0
}

// noRespondersHeader is the header block of a no-responders status.
var noRespondersHeader = []byte("NATS/1.0 503\r\n\r\n")

// movedRefusal turns the NotOwnerError of a part that reached a node which
// does not own its topic (the request was sent here already: a forward, or
// a client sending straight to the owner it knew) into SEGMENT_SEALED with
// the layout epoch read, so that the producer refreshes the layout and
// resends it (nothing was stored); other errors are returned as they are.
func movedRefusal(err error) error {
	var moved *actors.NotOwnerError
	switch {
	case !errors.As(err, &moved):
		return err
	case moved.Epoch > 0:
		return api.SealedError(0, moved.Epoch)
	default:
		return api.Errorf(api.CodeUnavailable, "topic %s is owned by node %s; retry", moved.Topic, moved.Owner)
	}
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
