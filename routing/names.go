package routing

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalidName is wrapped by every error about a malformed tenant,
// namespace or topic name or topic URI. The wrapping error says which part is
// wrong and why; match it with errors.Is.
var ErrInvalidName = errors.New("braid/routing: invalid name")

// MaxNameLen is the longest tenant, namespace or topic part, in bytes.
const MaxNameLen = 128

// allowedChars describes the name alphabet in error messages.
const allowedChars = "allowed: A-Z a-z 0-9 _ -"

// Scheme is the kind of topic a URI names.
type Scheme string

const (
	// SchemeScalable names a scalable topic, tiled by segments:
	// topic://tenant/namespace/name.
	SchemeScalable Scheme = "topic"
	// SchemePersistent names a fixed topic with N partitions routed by
	// hash % N: persistent://tenant/namespace/name.
	SchemePersistent Scheme = "persistent"
)

// Valid reports whether s is one of the known schemes.
func (s Scheme) Valid() bool { return s == SchemeScalable || s == SchemePersistent }

// TopicName is a parsed topic URI, scheme://tenant/namespace/name.
// Values returned by ParseTopic are valid and ParseTopic(n.String()) == n.
type TopicName struct {
	Scheme    Scheme
	Tenant    string
	Namespace string
	Name      string // the topic's local name within its namespace
}

// String returns the topic URI, e.g. topic://acme/orders/payments.
func (t TopicName) String() string {
	return string(t.Scheme) + "://" + t.Tenant + "/" + t.Namespace + "/" + t.Name
}

// NamespaceName returns the namespace the topic belongs to.
func (t TopicName) NamespaceName() NamespaceName {
	return NamespaceName{Tenant: t.Tenant, Namespace: t.Namespace}
}

// Validate checks a TopicName built field by field (for instance from
// subject tokens): a known scheme and three valid parts. The error wraps
// ErrInvalidName.
func (t TopicName) Validate() error {
	if !t.Scheme.Valid() {
		return fmt.Errorf("%w: topic %s: unknown scheme %s, want %q or %q",
			ErrInvalidName, quoted(t.String()), quoted(string(t.Scheme)), SchemeScalable, SchemePersistent)
	}
	return validateParts("topic", t.String, "tenant", t.Tenant, "namespace", t.Namespace, "topic", t.Name)
}

// ParseTopic parses a topic URI, topic://tenant/namespace/name or
// persistent://tenant/namespace/name. The URI must be exactly in that form:
// a known lower-case scheme, "://", three non-empty parts each matching
// [A-Za-z0-9_-]{1,128}, no leading or trailing slash and no whitespace. Any
// other input returns an error wrapping ErrInvalidName that names the
// offending part and the reason.
func ParseTopic(uri string) (TopicName, error) {
	bad := func(format string, args ...any) (TopicName, error) {
		return TopicName{}, fmt.Errorf("%w: topic URI %s: %s", ErrInvalidName, quoted(uri), fmt.Sprintf(format, args...))
	}
	if uri == "" {
		return bad("empty, want scheme://tenant/namespace/name")
	}
	if strings.TrimSpace(uri) != uri {
		return bad("leading or trailing whitespace")
	}
	scheme, rest, found := strings.Cut(uri, "://")
	switch {
	case !found:
		return bad(`missing "://" after the scheme, want topic://tenant/namespace/name or persistent://tenant/namespace/name`)
	case scheme == "":
		return bad(`missing scheme before "://", want %q or %q`, SchemeScalable, SchemePersistent)
	case !Scheme(scheme).Valid():
		return bad("unknown scheme %s, want %q or %q", quoted(scheme), SchemeScalable, SchemePersistent)
	case strings.HasPrefix(rest, "/"):
		return bad(`leading slash after "://"`)
	case strings.HasSuffix(rest, "/"):
		return bad("trailing slash")
	}
	if parts := strings.Count(rest, "/") + 1; parts != 3 {
		return bad("%d parts after the scheme, want 3: tenant/namespace/name", parts)
	}
	tenant, afterTenant, _ := strings.Cut(rest, "/")
	namespace, name, _ := strings.Cut(afterTenant, "/")
	if err := validateParts("topic URI", func() string { return uri }, "tenant", tenant, "namespace", namespace, "topic", name); err != nil {
		return TopicName{}, err
	}
	return TopicName{Scheme: Scheme(scheme), Tenant: tenant, Namespace: namespace, Name: name}, nil
}

// NamespaceName is a parsed namespace name, tenant/namespace.
type NamespaceName struct {
	Tenant    string
	Namespace string
}

// String returns the namespace name, e.g. acme/orders.
func (n NamespaceName) String() string { return n.Tenant + "/" + n.Namespace }

// ParseNamespace parses tenant/namespace, each part matching
// [A-Za-z0-9_-]{1,128}. Any other input returns an error wrapping
// ErrInvalidName that names the offending part and the reason.
func ParseNamespace(name string) (NamespaceName, error) {
	bad := func(format string, args ...any) (NamespaceName, error) {
		return NamespaceName{}, fmt.Errorf("%w: namespace name %s: %s", ErrInvalidName, quoted(name), fmt.Sprintf(format, args...))
	}
	switch {
	case name == "":
		return bad("empty, want tenant/namespace")
	case strings.TrimSpace(name) != name:
		return bad("leading or trailing whitespace")
	case strings.Contains(name, "://"):
		return bad("a namespace has no scheme, want tenant/namespace")
	case strings.HasPrefix(name, "/"):
		return bad("leading slash")
	case strings.HasSuffix(name, "/"):
		return bad("trailing slash")
	}
	if parts := strings.Count(name, "/") + 1; parts != 2 {
		return bad("%d parts, want 2: tenant/namespace", parts)
	}
	tenant, namespace, _ := strings.Cut(name, "/")
	if err := validateParts("namespace name", func() string { return name }, "tenant", tenant, "namespace", namespace); err != nil {
		return NamespaceName{}, err
	}
	return NamespaceName{Tenant: tenant, Namespace: namespace}, nil
}

// ValidateName checks one tenant, namespace or topic part against the name
// rule [A-Za-z0-9_-]{1,128}. The error wraps ErrInvalidName and says why.
func ValidateName(part string) error {
	if reason := nameProblem(part); reason != "" {
		return fmt.Errorf("%w: %s: %s", ErrInvalidName, quoted(part), reason)
	}
	return nil
}

// validateParts checks alternating (kind, value) pairs of the name whole and
// reports the first bad part as `<label> "<whole>": <kind> "<value>": <reason>`.
// whole is only called on failure, so valid names cost no allocation.
func validateParts(label string, whole func() string, kindsAndValues ...string) error {
	for i := 0; i+1 < len(kindsAndValues); i += 2 {
		kind, value := kindsAndValues[i], kindsAndValues[i+1]
		if reason := nameProblem(value); reason != "" {
			return fmt.Errorf("%w: %s %s: %s %s: %s", ErrInvalidName, label, quoted(whole()), kind, quoted(value), reason)
		}
	}
	return nil
}

// maxQuoted bounds how much of a rejected input an error message repeats, so
// a hostile multi-megabyte name cannot bloat replies and logs.
const maxQuoted = 200

// quoted returns s quoted for an error message, cut after maxQuoted bytes.
func quoted(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:maxQuoted]), len(s))
}

// nameProblem returns why part breaks the name rule, or "" if it does not.
func nameProblem(part string) string {
	if part == "" {
		return "empty"
	}
	if len(part) > MaxNameLen {
		return fmt.Sprintf("too long, %d bytes, max %d", len(part), MaxNameLen)
	}
	for i := 0; i < len(part); i++ {
		if isNameChar(part[i]) {
			continue
		}
		r, size := utf8.DecodeRuneInString(part[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Sprintf("invalid UTF-8 byte 0x%02x at byte %d; %s", part[i], i, allowedChars)
		}
		return fmt.Sprintf("illegal character %s at byte %d; %s", describeRune(r), i, allowedChars)
	}
	return ""
}

func isNameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// describeRune names a rejected character, with a hint for the ones that
// have a meaning elsewhere (NATS subjects, URIs).
func describeRune(r rune) string {
	desc := fmt.Sprintf("%q (U+%04X", r, r)
	switch {
	case r == '.':
		desc += ", the NATS subject token separator"
	case r == '*' || r == '>':
		desc += ", a NATS subject wildcard"
	case r == '/':
		desc += ", the name part separator"
	case unicode.IsSpace(r):
		desc += ", whitespace"
	case unicode.IsControl(r):
		desc += ", a control character"
	case r > unicode.MaxASCII:
		desc += ", not ASCII"
	}
	return desc + ")"
}
