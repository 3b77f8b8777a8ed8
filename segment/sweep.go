package segment

import (
	"errors"
	"fmt"
	"omnishm/keys"
	"omnishm/scope"
	"os"
	"time"
)

// OrphanGrace is how old a lock file without a segment must be before a
// sweep removes it (SPEC §6): younger ones may belong to a put in progress.
const OrphanGrace = 60 * time.Second

// SweepOrphans removes the lock files in dir (empty: DefaultDir) that a
// crashed producer or receiver left behind: owned by this uid, without a
// segment, and last changed more than grace ago (grace <= 0: OrphanGrace).
// Each is checked, locked without waiting, checked again, then unlinked, so
// a lock file in use is never removed. It returns the removed paths.
func SweepOrphans(dir string, grace time.Duration) ([]string, error) {
	if dir == "" {
		dir = DefaultDir
	}
	if grace <= 0 {
		grace = OrphanGrace
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("segment: sweep %s: %w", dir, err)
	}
	uid := os.Getuid()
	cutoff := time.Now().Add(-grace)
	var removed []string
	var errs []error
	for _, e := range entries {
		key, ok := scope.LockKey(e.Name())
		if !ok || keys.Check(key) != nil || !e.Type().IsRegular() {
			continue
		}
		path := dir + "/" + e.Name()
		gone, err := sweepLock(path, dir+"/"+key, uid, cutoff)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, path)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("segment: sweep %s: %w", dir, err)
	}
	return removed, nil
}
