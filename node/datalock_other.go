//go:build !unix

package node

import "os"

// lockDataDir takes no lock where flock is not available.
func lockDataDir(dir string) (*os.File, error) { return nil, nil }
