//go:build linux

package connector

import (
	"omnishm/ring"
)

// BatchReceiver is a MessageReceiver that also claims, in one pass, the
// publications of a run of keys that have arrived already: a stream
// receiver that got chunk n takes the chunks after it without a lock pair,
// a producer check and a wait per chunk.
type BatchReceiver interface {
	MessageReceiver
	// TakeReady claims, without waiting, the publications of keys on edge
	// from->Stage() that are there now, in keys' order, and stops at the
	// first that is not. deliver is called once per publication taken,
	// in that order, with the message (the caller's) or the error that
	// consumed it, which ends the run. It returns how many it delivered.
	// A key it stops at is left to Recv and Get.
	TakeReady(from string, keys []string, deliver func(key string, m Message, err error)) (int, error)
}

// TakeReady implements BatchReceiver on the host rings of edge
// from->Stage() attached now (ring.Transport.TakeReady): each ring is
// locked at most once and its producer checked once for the whole run;
// no per-key segment is tried (a stat per key), and nothing is tried when
// no attached ring moved. Payloads are decoded as Recv's are. The error is
// a ring found corrupt (it is dropped, as in Recv) or a failed lock.
func (c *SHM) TakeReady(from string, keys []string, deliver func(key string, m Message, err error)) (int, error) {
	if len(keys) == 0 || c.closed.Load() || c.opts.StageID == NoStage || c.ring.Capacity() == 0 || !numeric(from) {
		return 0, nil
	}
	to := string(c.opts.StageID)
	n, err := c.ring.TakeReady(from, to, keys, decodeRing, func(key string, got ring.Taken, err error) {
		if err != nil {
			deliver(key, Message{}, keyError("recv", key, err))
			return
		}
		c.stats.got(from, to, PathRing, got.Size) // stats, as getRingWith counts
		deliver(key, Message{Payload: got.Value, Size: got.Size, Producer: got.Producer}, nil)
	})
	if err != nil {
		err = keyError("recv", keys[0], err)
	}
	return n, err
}
