// Package client is Braid's Go SDK: a Producer, a StreamConsumer and an
// Admin, talking to a Braid server over a NATS connection the application
// owns (the wire contract is package api).
//
// # What it owns
//
//   - Producer: routes records by the topic's layout (key hash -> segment ->
//     entry bucket, unkeyed round robin), batches them per unit, keeps one
//     batch in flight per unit (many units at once), and follows the producer
//     rule of DESIGN.md §1 across splits, merges and rebuckets, so the
//     records of one key are appended in Send order. Segments never show in
//     its API.
//   - StreamConsumer: joins a subscription, fetches batches, returns messages
//     one by one, batches cumulative acks per unit, re-joins when the server
//     has forgotten it, and never returns a message twice.
//   - QueueConsumer: joins a queue subscription (shared dispatch, no per-key
//     order), batches individual acks and nacks, sets the subscription's
//     ack timeout, redelivery backoff, max deliveries and dead-letter topic.
//   - CheckpointConsumer: no subscription; reads units directly, follows the
//     layout and applies the ordering rule itself, and hands out a
//     serializable Checkpoint to Restore from later.
//   - Admin: one method per admin endpoint.
//
// It does not own the NATS connection (connect, reconnect and close it
// yourself) nor any ordering logic beyond the producer's: the server's
// consumer group applies the ordering rule.
//
// # Errors
//
// A refusal by the server is an *api.Error whose code is in api's table; match
// it with errors.Is against the api sentinels (api.ErrTopicNotFound,
// api.ErrAlreadyExists, ...). The client's own errors are the sentinels
// ErrClosed, ErrTimeout, ErrNoServer, ErrInvalidOption and ErrRerouteLimit;
// each says when it is returned.
//
// Delivery is at-least-once. A produced record whose batch timed out is
// reported with ErrTimeout and not resent: it may or may not have been
// appended. A consumed message that was not acknowledged is delivered again
// after its consumer leaves, dies or the server restarts.
//
// # Example
//
//	nc, _ := nats.Connect("nats://127.0.0.1:4222")
//	defer nc.Close()
//	ctx := context.Background()
//
//	admin := client.NewAdmin(nc)
//	_, err := admin.CreateTopic(ctx, "topic://public/default/orders", 2)
//	if err != nil && !errors.Is(err, api.ErrAlreadyExists) {
//		return err
//	}
//
//	p, err := client.NewProducer(nc, "topic://public/default/orders", client.WithLinger(2*time.Millisecond))
//	if err != nil {
//		return err
//	}
//	rec := api.Record{Key: []byte("customer-42"), Payload: []byte(`{"total":12}`)}
//	err = p.Send(ctx, rec, func(id client.MessageID, err error) {
//		if err != nil {
//			log.Printf("not appended: %v", err)
//		}
//	})
//	_ = p.Close(ctx) // flushes
//
//	c, err := client.NewStreamConsumer(nc, "topic://public/default/orders", "billing",
//		client.WithStart(api.StartEarliest))
//	if err != nil {
//		return err
//	}
//	defer c.Close(ctx)
//	for {
//		m, err := c.Next(ctx)
//		if err != nil {
//			return err
//		}
//		handle(m.Key, m.Payload)
//		m.Ack() // cumulative: this message and every earlier one of its unit
//	}
package client
