package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
)

// Admin operations of elastic topics.
const (
	// AdminTopicPolicies reads or changes a topic's policies, live.
	AdminTopicPolicies = "topic.policies"
	// AdminNamespacePolicies reads or changes a namespace's policies, live
	// for every topic of the namespace.
	AdminNamespacePolicies = "namespace.policies"
)

// TopicPoliciesRequest is the body of topic.policies. Without Policies and
// Unset it only reads. Policies sets the keys it carries and keeps the
// others; Unset removes keys (by their JSON names), which then resolve from
// the namespace or the broker default.
type TopicPoliciesRequest struct {
	Topic    string    `json:"topic"`
	Policies *Policies `json:"policies,omitempty"`
	Unset    []string  `json:"unset,omitempty"`
}

// NamespacePoliciesRequest is the body of namespace.policies, with the same
// rules as TopicPoliciesRequest.
type NamespacePoliciesRequest struct {
	Namespace string    `json:"namespace"`
	Policies  *Policies `json:"policies,omitempty"`
	Unset     []string  `json:"unset,omitempty"`
}

// PoliciesReply is the reply of topic.policies and namespace.policies:
// the policies stored at that level, and what every setting resolves to
// (for a namespace: over the broker defaults only).
type PoliciesReply struct {
	Policies  Policies `json:"policies"`
	Effective Policies `json:"effective"`
}

// PolicyKeys lists the JSON names of every policy, sorted.
func PolicyKeys() []string {
	var keys []string
	t := reflect.TypeFor[Policies]()
	for i := range t.NumField() {
		keys = append(keys, jsonName(t.Field(i)))
	}
	slices.Sort(keys)
	return keys
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// Update returns a copy of p (nil is empty) with the keys set in set
// replacing p's and the keys named in unset removed. An unknown key in unset
// is an INVALID_POLICY error; set is not validated here.
func (p *Policies) Update(set *Policies, unset []string) (*Policies, error) {
	out := Policies{}
	if p != nil {
		out = *p
	}
	dst := reflect.ValueOf(&out).Elem()
	if set != nil {
		src := reflect.ValueOf(set).Elem()
		for i := range src.NumField() {
			if !src.Field(i).IsNil() {
				dst.Field(i).Set(src.Field(i))
			}
		}
	}
	if set != nil && set.Retention != nil {
		out.RetentionMs = nil // one name replaces the other
	}
	if set != nil && set.RetentionMs != nil {
		out.Retention = nil
	}
	for _, key := range unset {
		i := slices.IndexFunc(reflect.VisibleFields(dst.Type()), func(f reflect.StructField) bool { return jsonName(f) == key })
		if i < 0 {
			return nil, Errorf(CodeInvalidPolicy, "unset: %q is not a policy; the policies are %s", key, strings.Join(PolicyKeys(), ", "))
		}
		dst.Field(i).SetZero()
	}
	return &out, nil
}

// Empty reports whether no policy is set.
func (p *Policies) Empty() bool {
	if p == nil {
		return true
	}
	b, _ := json.Marshal(p)
	return string(b) == "{}"
}
