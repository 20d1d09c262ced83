package consumers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"
)

// DeleteTopic stops every group of a topic and removes their logs: what a
// topic delete does to its subscriptions.
func (m *Manager) DeleteTopic(topic string) error {
	m.mu.Lock()
	var pids []*actor.PID
	for key, pid := range m.groups {
		if key.topic == topic {
			pids = append(pids, pid)
			delete(m.groups, key)
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, pid := range pids {
		if err := m.system.Root.PoisonFuture(pid).Wait(); err != nil {
			errs = append(errs, fmt.Errorf("stopping consumer group %s: %w", pid.Id, err))
		}
	}
	if err := os.RemoveAll(filepath.Join(m.dataDir, escapeTopic(topic))); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
