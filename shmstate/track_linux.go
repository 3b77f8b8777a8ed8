package shmstate

// Scan is Scan(o) with OldestReady and Activity filled from this Tracker's
// earlier scans (see Tracker). o should be the same on every call, with
// Now zero (each scan is timed by the clock); rings it does not select are
// forgotten.
func (t *Tracker) Scan(o Options) (*State, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o = o.withDefaults()
	st, err := Scan(o)
	if err != nil {
		return nil, err
	}
	t.observe(st, o.Now)
	return st, nil
}
