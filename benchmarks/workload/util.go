package workload

import (
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
)

// Median returns the middle value of v (the upper of the middle two when
// there are as many on each side), as the benchmarks report a round's
// ratio; v must not be empty.
func Median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BuildBraid builds the braid binary into dir and returns its path, for
// benchmarks that run `braid serve` processes.
func BuildBraid(dir string) (string, error) {
	bin := filepath.Join(dir, "braid")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/braidmq/braid/cmd/braid").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/braid: %v\n%s", err, out)
	}
	return bin, nil
}

// DirBytes is the size of the files under dir.
func DirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
