package connector

// RingMaxPayload exposes the ring's payload limit for key to the tests.
func RingMaxPayload(c *SHM, key string) int { return c.ring.MaxPayload(key) }
