//go:build linux

package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadSize is returned by ParseSize and ParseSizes for text that is not a
// payload size.
var ErrBadSize = errors.New("bench: bad size")

// units are the size suffixes ParseSize accepts, case-insensitively:
// binary (KiB = 1024) and decimal (KB = 1000), plus B for bytes.
var units = []struct {
	suffix string
	factor int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"b", 1},
}

// maxSize bounds a benchmark payload: the largest per-key segment anyone
// should time on a laptop, and far from int overflow.
const maxSize = 4 << 30

// ParseSize reads a byte count: 512, 4KiB, 64KiB, 1MiB, 1GiB (binary),
// 4KB, 1MB (decimal), 100B. The result is positive and at most 4 GiB.
func ParseSize(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	factor := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, factor = strings.TrimSpace(num), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > maxSize/factor {
		return 0, fmt.Errorf("%w: %q (want e.g. 512, 4KiB, 1MiB, 1MB)", ErrBadSize, s)
	}
	return int(n * factor), nil
}

// ParseSizes reads a comma-separated list of sizes, in the given order.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := ParseSize(part)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// FormatSize prints a byte count the way ParseSize reads it back, with a
// binary unit when it divides exactly: 512, 4KiB, 1MiB, 1000.
func FormatSize(n int) string {
	for _, u := range []struct {
		suffix string
		factor int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.factor && n%u.factor == 0 {
			return strconv.Itoa(n/u.factor) + u.suffix
		}
	}
	return strconv.Itoa(n)
}
