package compaction

import (
	"path/filepath"
	"strconv"
	"strings"
)

// A unit's compacted logs live in its directory, one per generation (the
// compaction that wrote it): "compacted-<generation>". The compactor writes
// and removes them (package lifecycle); readers open the generation the
// topic's compaction record names (package actors).

// generationPrefix starts the name of a compacted log's directory.
const generationPrefix = "compacted-"

// GenerationDir is where a unit whose directory is unitDir keeps its
// compacted log of generation gen.
func GenerationDir(unitDir string, gen uint64) string {
	return filepath.Join(unitDir, generationPrefix+strconv.FormatUint(gen, 10))
}

// GenerationOf returns the generation of the compacted log a directory
// named name holds, and false when the name is not a compacted log's.
func GenerationOf(name string) (uint64, bool) {
	g, ok := strings.CutPrefix(filepath.Base(name), generationPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(g, 10, 64)
	return n, err == nil
}
