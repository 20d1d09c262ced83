package consumers

import (
	"errors"
	"os"
	"path/filepath"
)

// DeleteTopic stops every group of a topic and removes their logs: what a
// topic delete does to its subscriptions. While it runs, requests for the
// topic's subscriptions are refused with TOPIC_DELETED; afterwards a join
// would create a new, empty subscription (the cluster layer refuses
// requests for topics that do not exist).
func (m *Manager) DeleteTopic(topic string) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errClosed
	}
	m.deleting[topic] = true
	defer func() {
		m.mu.Lock()
		delete(m.deleting, topic)
		m.mu.Unlock()
	}()
	var keys []groupKey
	for key := range m.groups {
		if key.topic == topic {
			keys = append(keys, key)
		}
	}
	futures := m.poisonLocked(keys)
	m.mu.Unlock()

	err := waitStopped(futures)
	if rmErr := os.RemoveAll(filepath.Join(m.dataDir, escapeTopic(topic))); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	return err
}
