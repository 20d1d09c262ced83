package api

import (
	"errors"
	"fmt"
	"testing"
)

func TestCodesAreUnique(t *testing.T) {
	t.Parallel()
	numbers, symbols := map[int]bool{}, map[string]bool{}
	for _, c := range Codes {
		if numbers[c.Number] || symbols[c.Symbol] {
			t.Fatalf("duplicate code %+v", c)
		}
		numbers[c.Number], symbols[c.Symbol] = true, true
		if got, ok := CodeByNumber(c.Number); !ok || got != c {
			t.Fatalf("CodeByNumber(%d) = %+v", c.Number, got)
		}
	}
}

func TestErrorHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range Codes {
		e := Errorf(c, "something about %s", c.Symbol)
		code, desc := e.HeaderValues()
		back := ParseError(code, desc)
		if back.Code != c || back.Message != e.Message {
			t.Fatalf("%v: round trip gave %+v", c, back)
		}
		if !errors.Is(fmt.Errorf("wrapped: %w", back), &Error{Code: c}) {
			t.Fatalf("%v: errors.Is fails through wrapping", c)
		}
	}
	sealed := SealedError(4, 12)
	back := ParseError(sealed.HeaderValues())
	if back.Epoch != 12 || !errors.Is(back, ErrSegmentSealed) {
		t.Fatalf("sealed epoch lost: %+v", back)
	}
	if ParseError("", "") != nil {
		t.Fatal("empty code must mean no error")
	}
	if errors.Is(ErrTopicNotFound, ErrSegmentSealed) {
		t.Fatal("different codes must not match")
	}
	if AsError(errors.New("boom")).Code != CodeInternal {
		t.Fatal("plain errors are INTERNAL")
	}
}

func TestPoliciesValidate(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	s := func(v string) *string { return &v }
	i := func(v int) *int { return &v }
	good := &Policies{SplitMsgRateIn: f(10000), SplitWindow: s("3s"), Retention: s("-1s"),
		MinSegments: i(1), MaxSegments: i(64), Durability: s("none")}
	if err := good.Validate(); err != nil {
		t.Fatalf("good policies refused: %v", err)
	}
	bad := map[string]*Policies{
		"negative rate":  {MergeMsgRateIn: f(-1)},
		"bad duration":   {SplitWindow: s("3 seconds")},
		"neg duration":   {MergeCooldown: s("-5s")},
		"bad retention":  {Retention: s("forever")},
		"min above max":  {MinSegments: i(8), MaxSegments: i(4)},
		"zero budget":    {EntryBucketBudget: i(0)},
		"bad durability": {Durability: s("sometimes")},
		"no copy":        {ReplicationFactor: i(0)},
		"eight copies":   {ReplicationFactor: i(8)},
	}
	for name, p := range bad {
		if err := p.Validate(); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%s: got %v, want INVALID_POLICY", name, err)
		}
	}
}

// Messages for clients carry no Go package prefixes.
func TestUserMessage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`braid/routing: invalid name: topic "a b"`:           `invalid name: topic "a b"`,
		`x: braid/wal: corrupt record: braid/wal/tier: gone`: `x: corrupt record: gone`,
		`see braid/docs and topic://braid/x/y`:               `see braid/docs and topic://braid/x/y`,
		`braid/: odd`:                                        `braid/: odd`,
		`nothing to strip`:                                   `nothing to strip`,
	} {
		if got := UserMessage(in); got != want {
			t.Errorf("UserMessage(%q) = %q, want %q", in, got, want)
		}
	}
	if e := Errorf(CodeInvalidName, "%v", errors.New("braid/routing: invalid name: x")); e.Message != "invalid name: x" {
		t.Fatalf("Errorf: %q", e.Message)
	}
}
