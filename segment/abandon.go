//go:build linux

package segment

import (
	"errors"
	"fmt"
	"time"

	"omnishm/keys"
	"omnishm/scope"
)

// RemoveAbandoned removes what a producer that died left of its publication
// of key in dir (empty: DefaultDir). It is for a crash watchdog (package
// watchdog), which knows that the producer is dead and has already unlinked
// the segment it knew by identity. It removes:
//   - an unfinished segment: an empty regular file of this user at the
//     key's name. No publication is empty (SPEC §6) and producers write a
//     segment only under the key's lock, which is free: its producer died
//     between creating the file and sizing it;
//   - the key's lock file, when no segment is beside it: an orphan of
//     SPEC §6 without the grace, which spares puts in progress, and the
//     free lock shows there is none.
//
// Both are checked as Sweep checks an orphan: under the key's lock, taken
// without waiting, the same lock file as at the first look and this user's,
// unlinked while still held (a producer waiting on it then reopens, SPEC
// §6). A lock held by another process means that one has the key now, and
// a non-empty segment is someone's publication: then nothing is removed.
// It returns the paths it removed.
func RemoveAbandoned(dir, key string) ([]string, error) {
	if err := keys.Check(key); err != nil {
		return nil, err
	}
	var o SweepOptions
	o.ListOptions = ListOptions{Dir: dir}.withDefaults()
	lockPath, segPath := o.Dir+"/"+scope.LockName(key), o.Dir+"/"+key
	first, err := lstatFile(lockPath)
	switch {
	case err == errGone:
		return nil, nil
	case err != nil:
		return nil, abandonError(err)
	case !first.regular || first.uid != o.UID:
		return nil, nil
	}
	fd, err := o.lockNoWait(LockFile{Key: key, Path: lockPath, id: first.id}, time.Time{})
	if err != nil {
		return nil, abandonError(notNow(err))
	}
	defer closeFD(fd)
	var removed []string
	switch seg, err := lstatFile(segPath); {
	case err == errGone:
	case err != nil:
		return nil, abandonError(err)
	case !seg.regular || seg.uid != o.UID || seg.size > 0:
		return nil, nil
	default:
		if _, err := remove(segPath); err != nil {
			return nil, abandonError(err)
		}
		removed = append(removed, segPath)
	}
	if _, err := remove(lockPath); err != nil {
		return removed, abandonError(err)
	}
	return append(removed, lockPath), nil
}

// notNow drops the outcomes that mean another process has the key, or has
// removed the file first.
// The miss path of Claim comes here: no allocation before errors.As.
func notNow(err error) error {
	if errors.Is(err, errGone) || errors.Is(err, errBusy) || errors.Is(err, errReplaced) {
		return nil
	}
	var why skipReason
	if errors.As(err, &why) {
		return nil
	}
	return err
}

func abandonError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("segment: remove abandoned: %w", err)
}
