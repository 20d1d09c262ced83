package topology

import (
	"math"
	"testing"
)

func TestRange(t *testing.T) {
	t.Parallel()
	const max = math.MaxUint64
	lower, upper := Range{0, 1<<63 - 1}, Range{1 << 63, max}
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"contains lo", lower.Contains(0), true},
		{"contains hi", lower.Contains(1<<63 - 1), true},
		{"not contains above", lower.Contains(1 << 63), false},
		{"full contains max", FullRange.Contains(max), true},
		{"adjacent lower upper", lower.Adjacent(upper), true},
		{"adjacent upper lower", upper.Adjacent(lower), true},
		{"not adjacent to self", lower.Adjacent(lower), false},
		{"no wrap around at max", Range{max, max}.Adjacent(Range{0, 5}), false},
		{"no wrap around reversed", Range{0, 5}.Adjacent(Range{max - 1, max}), false},
		{"gap is not adjacent", Range{0, 5}.Adjacent(Range{7, 9}), false},
		{"overlapping is not adjacent", Range{0, 5}.Adjacent(Range{5, 9}), false},
		{"overlaps at one hash", Range{0, 5}.Overlaps(Range{5, 9}), true},
		{"touching does not overlap", lower.Overlaps(upper), false},
		{"full overlaps everything", FullRange.Overlaps(Range{max, max}), true},
		{"covers", FullRange.Covers(lower), true},
		{"does not cover", lower.Covers(FullRange), false},
		{"is full", lower.Union(upper).IsFull(), true},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if got := upper.Union(lower); got != FullRange {
		t.Errorf("Union = %v, want the full range", got)
	}
	mids := []struct {
		r    Range
		want uint64
	}{
		{FullRange, 1<<63 - 1},
		{upper, 0xbfffffffffffffff},
		{Range{4, 4}, 4},
		{Range{4, 5}, 4},
		{Range{4, 6}, 5},
		{Range{max - 1, max}, max - 1},
	}
	for _, m := range mids {
		if got := m.r.Mid(); got != m.want {
			t.Errorf("%v.Mid() = %#x, want %#x", m.r, got, m.want)
		}
	}
	if got, want := lower.String(), "[0x0000000000000000,0x7fffffffffffffff]"; got != want {
		t.Errorf("String = %s, want %s", got, want)
	}
}

func TestParseHash(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want uint64
	}{
		{"0x0", 0},
		{"0x8000000000000000", 1 << 63},
		{"0XFFFFFFFFFFFFFFFF", math.MaxUint64},
		{"0xAbC", 0xabc},
		{"0", 0},
		{"42", 42},
		{"18446744073709551615", math.MaxUint64},
	}
	for _, g := range good {
		got, err := ParseHash(g.in)
		if err != nil || got != g.want {
			t.Errorf("ParseHash(%q) = %#x, %v; want %#x", g.in, got, err, g.want)
		}
	}
	bad := []string{"", "0x", "0x10000000000000000", "0xg", "18446744073709551616", "-1", "+1", " 1", "1 ", "0x_1", "1_000", "1e3", "0b1", "x10", "0x-1"}
	for _, in := range bad {
		if got, err := ParseHash(in); err == nil {
			t.Errorf("ParseHash(%q) = %#x, want an error", in, got)
		} else {
			wantErr(t, err, ErrBadHash)
		}
	}
	for _, h := range []uint64{0, 1, 0xdeadbeef, 1 << 63, math.MaxUint64} {
		s := FormatHash(h)
		if len(s) != 18 {
			t.Errorf("FormatHash(%#x) = %q, want 18 characters", h, s)
		}
		if back, err := ParseHash(s); err != nil || back != h {
			t.Errorf("ParseHash(FormatHash(%#x)) = %#x, %v", h, back, err)
		}
	}
}
