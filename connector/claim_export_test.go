//go:build linux

package connector

// ClaimWaits counts the WaitClaimed calls under way on c, so a test can
// wait for one to begin before it acts.
func ClaimWaits(c *SHM) int {
	c.claims.mu.Lock()
	defer c.claims.mu.Unlock()
	n := 0
	for _, w := range c.claims.waits {
		n += w.n
	}
	return n
}
