package routing

// Subject prefixes of the per-topic NATS subjects (DESIGN §5). The three
// tokens that follow are tenant, namespace and topic; the name rule makes
// each of them exactly one NATS token.
const (
	ProduceSubjectPrefix = "braid.v1.produce."
	LayoutSubjectPrefix  = "braid.v1.layout."
)

// ProduceSubject returns the subject a producer sends one message of topic t
// to: braid.v1.produce.<tenant>.<namespace>.<topic>. The subject carries no
// scheme: a topic name is unique within its namespace whichever its scheme,
// and the server looks the scheme up in the topic's metadata. t must be
// valid (from ParseTopic); an invalid part could span several tokens.
func ProduceSubject(t TopicName) string {
	return ProduceSubjectPrefix + subjectTokens(t)
}

// LayoutSubject returns the subject the controller of topic t publishes
// every layout change on: braid.v1.layout.<tenant>.<namespace>.<topic>.
// t must be valid (from ParseTopic).
func LayoutSubject(t TopicName) string {
	return LayoutSubjectPrefix + subjectTokens(t)
}

func subjectTokens(t TopicName) string {
	return t.Tenant + "." + t.Namespace + "." + t.Name
}

// TopicFromSubjectTokens rebuilds the topic addressed by the last three
// tokens of a per-topic subject. The result has the scalable scheme, since
// subjects carry none. Every token is validated, so wildcards or anything
// else outside the name rule return an error wrapping ErrInvalidName.
func TopicFromSubjectTokens(tenant, namespace, name string) (TopicName, error) {
	t := TopicName{Scheme: SchemeScalable, Tenant: tenant, Namespace: namespace, Name: name}
	if err := t.Validate(); err != nil {
		return TopicName{}, err
	}
	return t, nil
}
