package consumers

// Moving a group's state between nodes. A group's state is its log, in
// its own directory. In a cluster the node serving a topic changes; the
// cluster layer moves the group's directory to the new node before the
// group starts there (WithPrepare), after the old node stopped the group
// (Release). The log format does not change: the new node replays it as
// after a restart.

// WithPrepare sets a function run before a group is spawned, with its
// topic, subscription and directory: it may fill the directory (the
// group's state from another node), and its error fails the request
// that would have started the group.
func WithPrepare(fn func(topic, subscription, dir string) error) Option {
	return func(o *managerOptions) { o.prepare = fn }
}

// Release stops the group of topic and subscription if it runs here,
// once it has answered what it holds, and returns its directory; the
// group starts again (through the prepare function) on its next request.
func (m *Manager) Release(topic, subscription string) (string, error) {
	if err := validateName("subscription", subscription); err != nil {
		return "", err
	}
	key := groupKey{topic: topic, subscription: subscription}
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return "", errClosed
		}
		if ch := m.parked[key]; ch != nil {
			m.mu.Unlock()
			<-ch // stopping already: wait, then look again
			continue
		}
		if m.groups[key] == nil {
			m.mu.Unlock()
			return m.groupDir(topic, subscription), nil
		}
		done := make(chan struct{})
		m.parked[key] = done
		futures := m.poisonLocked([]groupKey{key})
		m.mu.Unlock()
		err := waitStopped(futures)
		m.mu.Lock()
		delete(m.parked, key)
		close(done)
		m.mu.Unlock()
		if err != nil {
			return "", err
		}
		return m.groupDir(topic, subscription), nil
	}
}

// Release is Manager.Release for queue groups.
func (q *QueueManager) Release(topic, subscription string) (string, error) {
	return q.m.Release(topic, subscription)
}

// Dir is the directory of the group of topic and subscription.
func (m *Manager) Dir(topic, subscription string) string { return m.groupDir(topic, subscription) }

// Dir is Manager.Dir for queue groups.
func (q *QueueManager) Dir(topic, subscription string) string {
	return q.m.groupDir(topic, subscription)
}
