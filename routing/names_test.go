package routing

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// nameRule is the name rule of DESIGN §1, as a regular expression the tests
// hold the hand-written validator against.
var nameRule = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

var long129 = strings.Repeat("x", 129)

func TestParseTopicRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		uri  string
		want []string // substrings the message must contain
	}{
		{"", []string{"empty"}},
		{"*", []string{`missing "://"`}},
		{">", []string{`missing "://"`}},
		{"a/b/c", []string{`missing "://"`}},
		{"topic:/a/b/c", []string{`missing "://"`}},
		{"topic:a/b/c", []string{`missing "://"`}},
		{"://a/b/c", []string{"missing scheme"}},
		{"kafka://a/b/c", []string{`unknown scheme "kafka"`}},
		{"TOPIC://a/b/c", []string{`unknown scheme "TOPIC"`}},
		{"non-persistent://a/b/c", []string{`unknown scheme "non-persistent"`}},
		{"topic://a/b", []string{"2 parts", "want 3"}},
		{"topic://a", []string{"1 parts", "want 3"}},
		{"topic://", []string{"1 parts"}},
		{"topic://a/b/c/d", []string{"4 parts", "want 3"}},
		{"topic://a//c", []string{`namespace ""`, "empty"}},
		{"topic://a/b/c/", []string{"trailing slash"}},
		{"topic:///a/b/c", []string{"leading slash"}},
		{"topic:///a/b", []string{"leading slash"}},
		{"topic://a b/c/d", []string{`tenant "a b"`, "illegal character ' '", "whitespace"}},
		{" topic://a/b/c", []string{"leading or trailing whitespace"}},
		{"topic://a/b/c\n", []string{"leading or trailing whitespace"}},
		{"topic://a/b\t/c", []string{`namespace "b\t"`, `'\t'`, "whitespace"}},
		{"topic://a/b/ü", []string{`topic "ü"`, "illegal character 'ü' (U+00FC, not ASCII) at byte 0"}},
		{"topic://a/b/c\xff", []string{"invalid UTF-8 byte 0xff at byte 1"}},
		{"topic://a/b/c\x00", []string{`'\x00'`, "control character"}},
		{"topic://a/" + long129 + "/c", []string{"namespace", "too long, 129 bytes, max 128"}},
		{"topic://" + long129 + "/b/c", []string{"tenant", "too long"}},
		{"persistent://a/b/" + long129, []string{"topic", "too long"}},
		{"topic://a/b/c.d", []string{`topic "c.d"`, "'.'", "NATS subject token separator"}},
		{"topic://a/*/c", []string{`namespace "*"`, "NATS subject wildcard"}},
		{"topic://a/b/>", []string{`topic ">"`, "NATS subject wildcard"}},
		{"topic://a/b/c?x=1", []string{`topic "c?x=1"`, "illegal character '?'"}},
		{"topic://a:b/c/d", []string{`tenant "a:b"`, "illegal character ':'"}},
		{"topic://a/b/c#frag", []string{"illegal character '#'"}},
		{"topic://a/b/topic://a/b/c", []string{"7 parts"}},
		{"topic://a%20b/c/d", []string{"illegal character '%'"}},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			got, err := ParseTopic(tc.uri)
			if err == nil {
				t.Fatalf("ParseTopic(%q) = %+v, want an error", tc.uri, got)
			}
			if !errors.Is(err, ErrInvalidName) {
				t.Errorf("ParseTopic(%q) error %v does not wrap ErrInvalidName", tc.uri, err)
			}
			if got != (TopicName{}) {
				t.Errorf("ParseTopic(%q) returned %+v with its error, want the zero TopicName", tc.uri, got)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "braid/routing: invalid name: topic URI ") {
				t.Errorf("error %q does not start with the sentinel and the URI", msg)
			}
			for _, want := range tc.want {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
		})
	}
}

func TestParseTopicAccepts(t *testing.T) {
	t.Parallel()
	long128 := strings.Repeat("Z", 128)
	for _, tc := range []struct {
		uri  string
		want TopicName
	}{
		{"topic://acme/orders/payments", TopicName{SchemeScalable, "acme", "orders", "payments"}},
		{"persistent://public/default/my-topic", TopicName{SchemePersistent, "public", "default", "my-topic"}},
		{"topic://a/b/c", TopicName{SchemeScalable, "a", "b", "c"}},
		{"topic://A_1/B-2/C_3-x", TopicName{SchemeScalable, "A_1", "B-2", "C_3-x"}},
		{"topic://-/_/0", TopicName{SchemeScalable, "-", "_", "0"}},
		{"topic://" + long128 + "/" + long128 + "/" + long128, TopicName{SchemeScalable, long128, long128, long128}},
		{"topic://topic/persistent/topic", TopicName{SchemeScalable, "topic", "persistent", "topic"}},
	} {
		got, err := ParseTopic(tc.uri)
		if err != nil {
			t.Errorf("ParseTopic(%q): %v", tc.uri, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseTopic(%q) = %+v, want %+v", tc.uri, got, tc.want)
		}
		if got.String() != tc.uri {
			t.Errorf("ParseTopic(%q).String() = %q", tc.uri, got.String())
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Validate() of parsed %q: %v", tc.uri, err)
		}
	}
}

func TestTopicNameNamespace(t *testing.T) {
	t.Parallel()
	topic, err := ParseTopic("topic://acme/orders/payments")
	if err != nil {
		t.Fatal(err)
	}
	ns := topic.NamespaceName()
	if ns != (NamespaceName{"acme", "orders"}) || ns.String() != "acme/orders" {
		t.Errorf("NamespaceName() = %+v (%q), want acme/orders", ns, ns.String())
	}
}

func TestTopicNameValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		topic TopicName
		want  string // "" means valid
	}{
		{TopicName{SchemeScalable, "a", "b", "c"}, ""},
		{TopicName{SchemePersistent, "a", "b", "c"}, ""},
		{TopicName{"", "a", "b", "c"}, `unknown scheme ""`},
		{TopicName{"kafka", "a", "b", "c"}, `unknown scheme "kafka"`},
		{TopicName{SchemeScalable, "", "b", "c"}, `tenant "": empty`},
		{TopicName{SchemeScalable, "a", "b/x", "c"}, `namespace "b/x": illegal character '/'`},
		{TopicName{SchemeScalable, "a", "b", long129}, "too long"},
	} {
		err := tc.topic.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v.Validate() = %v, want nil", tc.topic, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v.Validate() = %v, want ErrInvalidName mentioning %q", tc.topic, err, tc.want)
		}
	}
}

func TestParseNamespace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want NamespaceName
	}{
		{"public/default", NamespaceName{"public", "default"}},
		{"acme/orders", NamespaceName{"acme", "orders"}},
		{"A-1/b_2", NamespaceName{"A-1", "b_2"}},
	} {
		got, err := ParseNamespace(tc.in)
		if err != nil || got != tc.want || got.String() != tc.in {
			t.Errorf("ParseNamespace(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in, want string
	}{
		{"", "empty"},
		{"acme", "1 parts, want 2"},
		{"a/b/c", "3 parts, want 2"},
		{"a/", "trailing slash"},
		{"/a", "leading slash"},
		{"a//b", "3 parts"},
		{" a/b", "whitespace"},
		{"topic://a/b", "no scheme"},
		{"a/b.c", `namespace "b.c"`},
		{"a*/b", `tenant "a*"`},
		{"a/" + long129, "too long"},
	} {
		got, err := ParseNamespace(tc.in)
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseNamespace(%q) = %+v, %v; want ErrInvalidName", tc.in, got, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "namespace name") {
			t.Errorf("ParseNamespace(%q) error %q does not mention %q", tc.in, msg, tc.want)
		}
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "Z", "0", "_", "-", "my-topic_01", strings.Repeat("a", 128)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", ok, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{long129, "too long, 129 bytes, max 128"},
		{"a.b", "'.'"},
		{"a/b", "'/'"},
		{"*", "wildcard"},
		{">", "wildcard"},
		{"a b", "whitespace"},
		{"é", "not ASCII"},
		{"\x80", "invalid UTF-8"},
		{"a+b", "illegal character '+' (U+002B) at byte 1"},
	} {
		err := ValidateName(tc.in)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName mentioning %q", tc.in, err, tc.want)
		}
	}
}

// TestValidateNameMatchesRule holds the hand-written validator against the
// regular expression on every single byte and a few multi-byte strings.
func TestValidateNameMatchesRule(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		s := "x" + string([]byte{byte(c)}) + "y"
		if got, want := ValidateName(s) == nil, nameRule.MatchString(s); got != want {
			t.Errorf("ValidateName(%q) accepts = %v, regexp = %v", s, got, want)
		}
	}
}

func TestErrorsQuoteBoundedInput(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("a", 1<<20)
	for _, err := range []error{
		func() error { _, err := ParseTopic("topic://a/b/" + huge); return err }(),
		func() error { _, err := ParseTopic(huge + "://a/b/c"); return err }(),
		func() error { _, err := ParseNamespace(huge); return err }(),
		ValidateName(huge),
		TopicName{SchemeScalable, "a", huge, "c"}.Validate(),
	} {
		if !errors.Is(err, ErrInvalidName) {
			t.Fatalf("got %v, want ErrInvalidName", err)
		}
		if msg := err.Error(); len(msg) > 1000 || !strings.Contains(msg, "bytes)") {
			t.Errorf("error for a 1 MiB input is %d bytes long or does not say it was cut: %.300s", len(msg), msg)
		}
	}
}

func TestValidNamesDoNotAllocate(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ParseTopic("topic://acme/orders/payments"); err != nil {
			t.Fatal(err)
		}
		if _, err := TopicFromSubjectTokens("acme", "orders", "payments"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("parsing valid names allocates %.1f times, want 0", allocs)
	}
}

func FuzzParseTopic(f *testing.F) {
	for _, seed := range []string{
		"topic://acme/orders/payments", "persistent://public/default/x",
		"topic://a/b", "topic://a/b/c/", "topic://a//c", "kafka://a/b/c",
		"topic://a b/c/d", "topic://a/b/ü", "topic:/a/b/c", "*", ">", "",
		"topic://a/b/c.d", "topic:///a/b/c", "topic://a/b/" + long129,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		topic, err := ParseTopic(uri)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ParseTopic(%q) error %v does not wrap ErrInvalidName", uri, err)
			}
			return
		}
		if !topic.Scheme.Valid() {
			t.Fatalf("ParseTopic(%q) accepted scheme %q", uri, topic.Scheme)
		}
		for _, part := range []string{topic.Tenant, topic.Namespace, topic.Name} {
			if !nameRule.MatchString(part) {
				t.Fatalf("ParseTopic(%q) accepted part %q outside the name rule", uri, part)
			}
		}
		if topic.String() != uri {
			t.Fatalf("ParseTopic(%q).String() = %q; accepted input must be canonical", uri, topic.String())
		}
		again, err := ParseTopic(topic.String())
		if err != nil || again != topic {
			t.Fatalf("ParseTopic(%q) = %+v, %v; want %+v", topic.String(), again, err, topic)
		}
	})
}

func FuzzParseNamespace(f *testing.F) {
	for _, seed := range []string{"public/default", "a/b/c", "a/", "/b", "", "a/b.c", "topic://a/b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		ns, err := ParseNamespace(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ParseNamespace(%q) error %v does not wrap ErrInvalidName", name, err)
			}
			return
		}
		if !nameRule.MatchString(ns.Tenant) || !nameRule.MatchString(ns.Namespace) {
			t.Fatalf("ParseNamespace(%q) accepted %+v outside the name rule", name, ns)
		}
		if ns.String() != name {
			t.Fatalf("ParseNamespace(%q).String() = %q", name, ns.String())
		}
	})
}
