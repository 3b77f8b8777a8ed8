package shmstate_test

import (
	"fmt"
	"os"

	"omnishm/shmstate"
)

// A dry run lists what Prune would remove; Scan shows everything.
func ExamplePrune() {
	dir, _ := os.MkdirTemp("", "shm")
	defer os.RemoveAll(dir)
	// A lock file whose segment is gone, older than a minute: an orphan.
	os.WriteFile(dir+"/shm_req_1_lockfile.lock", nil, 0o600)
	old, _ := os.Stat(dir)
	os.Chtimes(dir+"/shm_req_1_lockfile.lock", old.ModTime().Add(-shmstate.OrphanGrace*2), old.ModTime().Add(-shmstate.OrphanGrace*2))

	st, _ := shmstate.Scan(shmstate.Options{Dir: dir})
	fmt.Println(len(st.Scopes), "scopes;", st.Locks[0].Key, "orphan:", st.Locks[0].Orphan)
	rep, _ := shmstate.Prune(shmstate.PruneOptions{Options: shmstate.Options{Dir: dir}, DryRun: true})
	for _, r := range rep.Removed {
		fmt.Println(r.What, r.Reason)
	}
	// Output:
	// 0 scopes; req_1 orphan: true
	// lock orphan: segment gone
}
