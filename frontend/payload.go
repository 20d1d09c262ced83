package frontend

import (
	"github.com/braidmq/braid/api"
	"github.com/nats-io/nats.go"
)

// EmbeddedMaxPayload is the embedded server's max message size (the node
// configures it so): a produce batch may carry up to max_payload_bytes of
// payload plus framing.
const EmbeddedMaxPayload = 8 << 20

// PayloadFraming is what a produce request needs besides its payload:
// the key and other headers, and a batch's framing.
const PayloadFraming = 64 << 10

// payloadCeiling is the largest max_payload_bytes this node's NATS carries
// in one message: the server's max_payload (the connection learns it when
// it connects) less PayloadFraming. A larger policy would let NATS refuse
// a message Braid accepts, with NATS's own error rather than Braid's.
func (n *Frontend) payloadCeiling() int { return PayloadCeiling(n.nc) }

// PayloadCeiling is payloadCeiling for a node connected by nc.
func PayloadCeiling(nc *nats.Conn) int {
	limit := int64(EmbeddedMaxPayload)
	if nc != nil && nc.MaxPayload() > 0 {
		limit = nc.MaxPayload()
	}
	return int(limit) - PayloadFraming
}

// checkPayloadPolicy refuses a max_payload_bytes over payloadCeiling.
func (n *Frontend) checkPayloadPolicy(p *api.Policies) error {
	if p == nil || p.MaxPayloadBytes == nil {
		return nil
	}
	if c := n.payloadCeiling(); *p.MaxPayloadBytes > c {
		return api.Errorf(api.CodeInvalidPolicy, "max_payload_bytes %d: over what NATS carries in one message here (max_payload %d, less %d bytes of headers and framing): at most %d",
			*p.MaxPayloadBytes, c+PayloadFraming, PayloadFraming, c)
	}
	return nil
}
