package node

import (
	"github.com/braidmq/braid/api"
)

// payloadFraming is what a produce request needs besides its payload:
// the key and other headers, and a batch's framing.
const payloadFraming = 64 << 10

// payloadCeiling is the largest max_payload_bytes this node's NATS carries
// in one message: the server's max_payload (the connection learns it when
// it connects) less payloadFraming. A larger policy would let NATS refuse
// a message Braid accepts, with NATS's own error rather than Braid's.
func (n *Node) payloadCeiling() int {
	limit := int64(natsMaxPayload)
	if n.nc != nil && n.nc.MaxPayload() > 0 {
		limit = n.nc.MaxPayload()
	}
	return int(limit) - payloadFraming
}

// checkPayloadPolicy refuses a max_payload_bytes over payloadCeiling.
func (n *Node) checkPayloadPolicy(p *api.Policies) error {
	if p == nil || p.MaxPayloadBytes == nil {
		return nil
	}
	if c := n.payloadCeiling(); *p.MaxPayloadBytes > c {
		return api.Errorf(api.CodeInvalidPolicy, "max_payload_bytes %d: over what NATS carries in one message here (max_payload %d, less %d bytes of headers and framing): at most %d",
			*p.MaxPayloadBytes, c+payloadFraming, payloadFraming, c)
	}
	return nil
}
