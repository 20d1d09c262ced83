package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// incarnationFile holds the data directory's incarnation.
const incarnationFile = "incarnation"

// incarnationLen is an incarnation's length: 16 random bytes in hex.
const incarnationLen = 32

// ResolveIncarnation returns the incarnation of the data directory dir: a
// random id made the first time the directory is used, and kept in it
// for as long as it lives. A node is its id and its directory's
// incarnation: a node that comes back under its id with an empty
// directory (a replaced disk) has a new incarnation, so that it is never
// taken for the member whose data it no longer holds. The id is written
// durably (the file, then the directory, synced) before it is returned;
// a file that does not hold one is refused, naming it.
func ResolveIncarnation(dir string) (string, error) {
	path := filepath.Join(dir, incarnationFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		have := strings.TrimSpace(string(b))
		if !validIncarnation(have) {
			return "", fmt.Errorf("%s holds %q, not a data directory incarnation (%d hex digits): the directory is damaged", path, have, incarnationLen)
		}
		return have, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("reading the data directory's incarnation: %w", err)
	}
	var r [incarnationLen / 2]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	inc := hex.EncodeToString(r[:])
	if err := writeSynced(path, []byte(inc+"\n")); err != nil {
		return "", fmt.Errorf("writing the data directory's incarnation: %w", err)
	}
	return inc, nil
}

// IncarnationSince returns when the data directory dir got its
// incarnation: its first use (the incarnation file is never written
// again).
func IncarnationSince(dir string) (time.Time, error) {
	info, err := os.Stat(filepath.Join(dir, incarnationFile))
	if err != nil {
		return time.Time{}, err
	}
	return info.ModTime(), nil
}

func validIncarnation(s string) bool {
	if len(s) != incarnationLen {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// writeSynced writes path through a synced temporary file renamed over
// it, then syncs the directory.
func writeSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
