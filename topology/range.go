package topology

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Range is an inclusive range [Lo, Hi] of key hashes.
// Invariant (checked by Validate, not by the methods): Lo <= Hi.
type Range struct {
	Lo, Hi uint64
}

// FullRange is the whole key-hash space, [0, 2^64-1].
var FullRange = Range{Lo: 0, Hi: math.MaxUint64}

// Contains reports whether h lies in r.
func (r Range) Contains(h uint64) bool { return r.Lo <= h && h <= r.Hi }

// Covers reports whether every hash of o lies in r.
func (r Range) Covers(o Range) bool { return r.Lo <= o.Lo && o.Hi <= r.Hi }

// Overlaps reports whether r and o share at least one hash.
func (r Range) Overlaps(o Range) bool { return r.Lo <= o.Hi && o.Lo <= r.Hi }

// Adjacent reports whether r and o touch without overlapping: r ends just
// before o begins, or o ends just before r begins. A range that ends at 2^64-1
// is adjacent to nothing above it (the space does not wrap around).
func (r Range) Adjacent(o Range) bool {
	return (r.Hi != math.MaxUint64 && r.Hi+1 == o.Lo) ||
		(o.Hi != math.MaxUint64 && o.Hi+1 == r.Lo)
}

// Union returns the smallest range that contains both r and o. It is the
// set union only when r and o overlap or are adjacent.
func (r Range) Union(o Range) Range {
	return Range{Lo: min(r.Lo, o.Lo), Hi: max(r.Hi, o.Hi)}
}

// Mid returns the last hash of the lower half of r: a default split gives
// the children [Lo, Mid()] and [Mid()+1, Hi]. For a single-hash range Mid is
// Lo and there is no upper half.
func (r Range) Mid() uint64 { return r.Lo + (r.Hi-r.Lo)/2 }

// IsFull reports whether r is the whole hash space.
func (r Range) IsFull() bool { return r == FullRange }

// String formats r as "[0x%016x,0x%016x]", the way errors and scripts show it.
func (r Range) String() string { return fmt.Sprintf("[%s,%s]", FormatHash(r.Lo), FormatHash(r.Hi)) }

// FormatHash formats h as "0x" followed by exactly 16 lower-case hex digits,
// the stable form used in JSON.
func FormatHash(h uint64) string {
	const digits = "0123456789abcdef"
	var b [18]byte
	b[0], b[1] = '0', 'x'
	for i := 17; i >= 2; i-- {
		b[i] = digits[h&0xf]
		h >>= 4
	}
	return string(b[:])
}

// ParseHash parses a key hash written as "0x" (or "0X") followed by 1 to 16
// hex digits, or as a decimal number. Signs, spaces, underscores and values
// above 2^64-1 are refused with ErrBadHash. It is what topic.split's "at"
// field goes through.
func ParseHash(s string) (uint64, error) {
	if hex, ok := cutHexPrefix(s); ok {
		return parseHex(s, hex)
	}
	if s == "" || strings.IndexFunc(s, func(c rune) bool { return c < '0' || c > '9' }) >= 0 {
		return 0, errorf(ErrBadHash, "bad hash %q: want 0x followed by 1 to 16 hex digits, or a decimal number", s)
	}
	h, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errorf(ErrBadHash, "bad hash %q: larger than 2^64-1", s)
	}
	return h, nil
}

// parseHexHash is ParseHash restricted to the "0x" form, which is all the
// JSON decoder accepts for range bounds.
func parseHexHash(s string) (uint64, error) {
	hex, ok := cutHexPrefix(s)
	if !ok {
		return 0, errorf(ErrBadHash, "bad hash %q: want 0x followed by 1 to 16 hex digits", s)
	}
	return parseHex(s, hex)
}

func cutHexPrefix(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		return s[2:], true
	}
	return "", false
}

func parseHex(whole, hex string) (uint64, error) {
	if len(hex) == 0 || len(hex) > 16 {
		return 0, errorf(ErrBadHash, "bad hash %q: want 1 to 16 hex digits after 0x, got %d", whole, len(hex))
	}
	var h uint64
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, errorf(ErrBadHash, "bad hash %q: %q is not a hex digit", whole, c)
		}
		h = h<<4 | uint64(v)
	}
	return h, nil
}
