package routing

import (
	"errors"
	"strings"
	"testing"
)

func TestSubjects(t *testing.T) {
	t.Parallel()
	for _, uri := range []string{"topic://acme/orders/payments", "persistent://acme/orders/payments"} {
		topic, err := ParseTopic(uri)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ProduceSubject(topic), "braid.v1.produce.acme.orders.payments"; got != want {
			t.Errorf("ProduceSubject(%s) = %q, want %q", uri, got, want)
		}
		if got, want := LayoutSubject(topic), "braid.v1.layout.acme.orders.payments"; got != want {
			t.Errorf("LayoutSubject(%s) = %q, want %q", uri, got, want)
		}
	}
}

func TestTopicFromSubjectTokens(t *testing.T) {
	t.Parallel()
	topic, err := ParseTopic("topic://acme/orders/payments")
	if err != nil {
		t.Fatal(err)
	}
	tokens := strings.Split(ProduceSubject(topic), ".")
	back, err := TopicFromSubjectTokens(tokens[3], tokens[4], tokens[5])
	if err != nil || back != topic {
		t.Errorf("TopicFromSubjectTokens(%q) = %+v, %v; want %+v", tokens[3:], back, err, topic)
	}
	if back.Scheme != SchemeScalable {
		t.Errorf("scheme = %q, want %q", back.Scheme, SchemeScalable)
	}
	for _, tc := range []struct{ tenant, namespace, name, want string }{
		{"*", "orders", "payments", `tenant "*"`},
		{"acme", ">", "payments", `namespace ">"`},
		{"acme", "orders", "pay.ments", `topic "pay.ments"`},
		{"acme", "orders", "", `topic "": empty`},
		{"", "orders", "payments", `tenant "": empty`},
		{"acme", "orders", long129, "too long"},
	} {
		got, err := TopicFromSubjectTokens(tc.tenant, tc.namespace, tc.name)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TopicFromSubjectTokens(%q, %q, %q) = %+v, %v; want ErrInvalidName mentioning %q",
				tc.tenant, tc.namespace, tc.name, got, err, tc.want)
		}
		if got != (TopicName{}) {
			t.Errorf("TopicFromSubjectTokens returned %+v with its error", got)
		}
	}
}
