package client

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/braidmq/braid/api"
	"github.com/braidmq/braid/routing"
	"github.com/nats-io/nats.go"
)

// Looking at messages without a subscription (read.offsets, read.fetch):
// one message by its id, as `nats stream get` does, and the first or last
// messages of a topic.

// ParseMessageID reads an id as MessageID.String writes it:
// segment/bucket/offset.
func ParseMessageID(s string) (MessageID, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return MessageID{}, fmt.Errorf("braid/client: message id %q: want segment/bucket/offset", s)
	}
	seg, err1 := strconv.ParseUint(parts[0], 10, 64)
	bucket, err2 := strconv.ParseUint(parts[1], 10, 31)
	off, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return MessageID{}, fmt.Errorf("braid/client: message id %q: want three numbers, segment/bucket/offset", s)
	}
	return MessageID{Segment: seg, Bucket: int(bucket), Offset: off}, nil
}

// readSubjects returns the read.fetch and read.offsets subjects of uri.
func readSubjects(uri string) (fetch, offsets string, err error) {
	name, err := routing.ParseTopic(uri)
	if err != nil {
		return "", "", fmt.Errorf("braid/client: %w", err)
	}
	return api.ReadSubject(api.ReadFetch, name.Tenant, name.Namespace, name.Name),
		api.ReadSubject(api.ReadOffsets, name.Tenant, name.Namespace, name.Name), nil
}

func (a *Admin) readFetch(ctx context.Context, subject string, req api.ReadRequest) (api.ReadReply, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.ReadReply{}, err
	}
	m, err := request(ctx, a.nc, a.cfg.requestTimeout, &nats.Msg{Subject: subject, Data: body})
	if err != nil {
		return api.ReadReply{}, err
	}
	return api.DecodeReadReply(m.Data)
}

// GetMessage returns the message of id in topic uri: api.ErrOffsetGone
// (or a unit status error) when it is no longer kept, ErrMessageNotFound
// when the unit has no message at that offset (yet).
func (a *Admin) GetMessage(ctx context.Context, uri string, id MessageID) (api.Message, error) {
	fetch, _, err := readSubjects(uri)
	if err != nil {
		return api.Message{}, err
	}
	r, err := a.readFetch(ctx, fetch, api.ReadRequest{Units: []api.ReadUnit{{Segment: id.Segment, Bucket: id.Bucket, Offset: id.Offset}}, Max: 1})
	if err != nil {
		return api.Message{}, err
	}
	for _, u := range r.Units {
		if u.Code != 0 {
			return api.Message{}, (&api.Result{Code: u.Code, Message: u.Message}).Err()
		}
	}
	if len(r.Messages) == 0 || r.Messages[0].Offset != id.Offset {
		return api.Message{}, fmt.Errorf("%w: %s has no message %s", ErrMessageNotFound, uri, id)
	}
	return r.Messages[0], nil
}

// ErrMessageNotFound: no message at that id (an offset not written yet, a
// unit of no segment).
var ErrMessageNotFound = fmt.Errorf("braid/client: message not found")

// Peek returns up to n messages of topic uri without a subscription: the
// first n kept (last false) or the last n (last true) of each unit by
// position, merged in time order (then by id) and cut to n. Times are the
// producers' when they set them, in any order: a message with an old time
// at the end of its unit is not among the first n, though it sorts first
// among those shown.
func (a *Admin) Peek(ctx context.Context, uri string, n int, last bool) ([]api.Message, error) {
	if n < 1 || n > 10000 {
		return nil, fmt.Errorf("braid/client: peek %d messages: want 1 to 10000", n)
	}
	fetch, offsets, err := readSubjects(uri)
	if err != nil {
		return nil, err
	}
	var offs api.OffsetsReply
	if err := requestJSON(ctx, a.nc, a.cfg.requestTimeout, offsets, api.OffsetsRequest{}, &offs); err != nil {
		return nil, err
	}
	var out []api.Message
	for _, u := range offs.Units {
		if u.Next == u.First {
			continue
		}
		from := u.First
		if last && u.Next-u.First > uint64(n) {
			from = u.Next - uint64(n)
		}
		// Each unit read on its own: its n first (or last) messages.
		for got := 0; got < n && from < u.Next; {
			r, err := a.readFetch(ctx, fetch, api.ReadRequest{Units: []api.ReadUnit{{Segment: u.Segment, Bucket: u.Bucket, Offset: from}}, Max: n - got})
			if err != nil {
				return nil, err
			}
			if len(r.Messages) == 0 {
				break // removed meanwhile (retention), or lost
			}
			out = append(out, r.Messages...)
			got += len(r.Messages)
			from = r.Messages[len(r.Messages)-1].Offset + 1
		}
	}
	slices.SortStableFunc(out, func(x, y api.Message) int {
		switch {
		case x.Time != y.Time:
			return cmp.Compare(x.Time, y.Time)
		case x.Segment != y.Segment:
			return cmp.Compare(x.Segment, y.Segment)
		case x.Bucket != y.Bucket:
			return x.Bucket - y.Bucket
		}
		return cmp.Compare(x.Offset, y.Offset)
	})
	if len(out) > n {
		if last {
			out = out[len(out)-n:]
		} else {
			out = out[:n]
		}
	}
	return out, nil
}
