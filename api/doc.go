// Package api is Braid's wire contract: the NATS subjects, the JSON request
// and reply types of the admin and consume endpoints, the binary formats of
// produce-batch and fetch, and the one table of error codes.
//
// It is a leaf package: it imports nothing of Braid's and no NATS code, so the
// server, the Go client and any other client can share it.
//
// # Subjects
//
// Every subject starts with "braid.v1.". Tenant, namespace and topic names are
// single NATS tokens ([A-Za-z0-9_-]{1,128}).
//
//	braid.v1.produce.<tenant>.<namespace>.<topic>         body = payload; headers Braid-Key, Braid-Time, Braid-Epoch
//	braid.v1.produce-batch.<tenant>.<namespace>.<topic>   body = produce batch (below); header Braid-Epoch
//	braid.v1.admin.<object>.<verb>                        JSON in, JSON out
//	braid.v1.layout.<tenant>.<namespace>.<topic>          published on every layout change: the describe JSON
//	braid.v1.consume.<verb>.<tenant>.<namespace>.<topic>  stream subscriptions; verbs: join, fetch, ack, leave (JSON in)
//	braid.v1.queue.<verb>.<tenant>.<namespace>.<topic>    queue subscriptions; verbs: join, fetch, ack, nack, leave (queue.go)
//	braid.v1.read.<verb>.<tenant>.<namespace>.<topic>     direct reads for checkpoint consumers; verbs: fetch, offsets (read.go)
//
// # Errors
//
// A failed request is answered with the NATS micro-service headers
// Nats-Service-Error-Code (the stable number of the Code) and
// Nats-Service-Error ("SYMBOL: text"). Codes lists them all.
//
// # Produce batch (request body of produce-batch)
//
//	| version (1B) = 1 | uvarint count | record * count |
//	record = | uvarint keyLen (0 = unkeyed) | key | varint unix-ms (0 = server time; negative refused)
//	         | uvarint headerCount | (uvarint len | name | uvarint len | value) * headerCount
//	         | uvarint payloadLen | payload |
//
// The reply is one result per record, in request order:
//
//	| version (1B) = 1 | uvarint count | result * count |
//	result = | uvarint code (0 = ok) | ok:    uvarint segment | uvarint bucket | uvarint offset
//	                                 | error: uvarint epoch | uvarint len | message |
//
// Layout changes are absorbed by the server: a record that reaches a
// segment after its seal is appended to the successor that owns its key,
// ahead of anything sent there afterwards, so requests of one key sent on
// one connection keep their order however many are in flight, and nothing
// is refused for a layout change.
//
// The optional Braid-Epoch header names the layout epoch the producer routed
// the request by, for producers that route by the layout themselves. A
// keyed record that meets a seal, or whose key belongs in the server's
// layout to a segment created after that epoch, is then refused with
// SEGMENT_SEALED, carrying the layout epoch the client must reach before it
// resends (the producer rule of the design), and nothing of it is stored.
//
// Headers of a produce-one request other than Braid-Key, Braid-Time,
// Braid-Epoch and those starting Nats- are stored with the message, in name
// order, and returned by every fetch. A produce request without a reply
// subject is appended all the same.
//
// # Lost fetch replies (consume.fetch)
//
// The server counts what it put in a fetch reply as delivered. A stream
// consumer whose fetch failed (a timeout: the reply may be lost) sets
// "resync":true on its next fetch, with "received" listing per unit the
// next offset it has not received; the server delivers again from there (or
// from the ack cursor for a unit not listed), so that a cumulative ack never
// covers a message the application did not see.
//
// # Fetch reply (consume.fetch)
//
//	| version (1B) = 1 | uvarint count | message * count |
//	message = | uvarint segment | uvarint bucket | uvarint offset | uvarint deliveries
//	          | varint unix-ms | uvarint keyLen (0 = unkeyed) | key
//	          | uvarint headerCount | (uvarint len | name | uvarint len | value) * headerCount
//	          | uvarint payloadLen | payload |
//
// A fetch request may ask for "format":"json" instead; the reply is then
// FetchReplyJSON, with payloads base64-encoded, for clients without a decoder.
// queue.fetch replies the same way; its deliveries count every delivery of
// the message, across restarts of the server. The read reply (read.fetch)
// is drawn in read.go.
package api
