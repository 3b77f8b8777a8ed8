package connector

// RingMaxPayload exposes the ring's payload limit for key to the tests.
func RingMaxPayload(c *SHM, key string) int { return c.ring.MaxPayload(key) }

// ReceiverFIFOs exposes the wake FIFOs this process reads, to the tests.
var ReceiverFIFOs = receiverFIFOs
