//go:build !linux

package wal

// syncFiles fsyncs each file where syncfs is not to be had.
func syncFiles(files []osFile) error {
	for _, f := range files {
		if err := f.File.Sync(); err != nil {
			return err
		}
	}
	return nil
}
