//go:build linux

package connector

import (
	"errors"

	"omnishm/frame"
	"omnishm/keys"
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

// BatchPutter is a Transport that also publishes several payloads of one
// edge in one pass: a stream producer with chunks queued locks the edge's
// ring once for all of them instead of once each.
type BatchPutter interface {
	Transport
	// PutMany is Put of each of puts on edge from->to, in order: each
	// one's Size, Descriptor and Err are what its Put would have
	// returned. It returns how many puts it tried. It tries none after
	// one that failed; those tried in the same pass as it may still have
	// been published, as their results say.
	PutMany(from, to string, puts []Publication) int
}

// A Publication is one payload of PutMany, and what its put returned.
type Publication struct {
	Key     string
	Payload any

	Size       int        // set by PutMany, as Put's
	Descriptor Descriptor // set by PutMany, as Put's
	Err        error      // set by PutMany, as Put's
}

// maxRun and runBytes bound the frames PutMany writes under one ring
// lock (at least one): a receiver waits for the lock while they are
// written, and runs of larger frames made a stream slower, not faster
// (stream.Sender's batchBytes says what was measured).
const (
	maxRun   = 16
	runBytes = 8 << 10
)

// PutMany implements BatchPutter. The frames the edge's ring takes are
// written in runs of up to maxRun under one ring lock (ring.Transport.
// PutMany), and a sleeping receiver of the stage is woken once per run;
// a payload the ring refuses takes the per-key path as Put's would, and
// one Put would treat on its own (a key whose per-key publication is
// still recorded, a payload over the ring's limit or that cannot be
// encoded) goes through Put.
func (c *SHM) PutMany(from, to string, puts []Publication) int {
	batch := c.ring.Capacity() > 0 && numeric(from) && numeric(to)
	for i := 0; i < len(puts); {
		n, failed := 0, false
		if batch {
			n, failed = c.putRun(from, to, puts[i:])
		}
		if n == 0 {
			p := &puts[i]
			p.Size, p.Descriptor, p.Err = c.Put(from, to, p.Key, p.Payload)
			n, failed = 1, p.Err != nil
		}
		if i += n; failed {
			return i
		}
	}
	return len(puts)
}

// putRun publishes the run of puts from puts[0] on that can share one
// ring pass, and returns how many it tried (0: puts[0] needs Put) and
// whether one of them failed.
func (c *SHM) putRun(from, to string, puts []Publication) (tried int, failed bool) {
	start := c.stats.start() // stats: 0 unless MeasureLatency
	var (
		frames   [maxRun]ring.Frame
		tickets  [maxRun]putTicket
		prepared [maxRun]*frame.Prepared
	)
	k, bytes := 0, 0
	for ; k < len(puts) && k < maxRun; k++ {
		key := puts[k].Key
		if c.closed.Load() || keys.Check(key) != nil {
			break // Put says why
		}
		t, err := c.beginPut(key)
		if err != nil {
			break
		}
		if t.replacing {
			c.endPut(key, t, Descriptor{}, errNotTried) // Put retires the earlier one
			break
		}
		p, err := frame.Prepare(puts[k].Payload, c.ring.MaxPayload(key))
		if err != nil {
			c.endPut(key, t, Descriptor{}, err) // Put's plain form, or its error
			break
		}
		if k > 0 && bytes+p.Size() > runBytes {
			// The next run's first: a receiver waits for the lock while a
			// run is written.
			p.Release()
			c.endPut(key, t, Descriptor{}, errNotTried)
			break
		}
		bytes += p.Size()
		kind := ring.KindBytes
		if p.Tensors() {
			kind = ring.KindTensors
		}
		frames[k] = ring.Frame{Key: key, Kind: kind, Size: p.Size(), Write: p.Write}
		tickets[k], prepared[k] = t, p
	}
	if k == 0 {
		return 0, false
	}
	c.trackRingDir()
	tried = c.ring.PutMany(from, to, frames[:k])
	for _, p := range prepared[:k] {
		p.Release()
	}
	woken := false
	for j := range k {
		p, f := &puts[j], &frames[j]
		switch {
		case j >= tried: // after a ring error: not published
			c.endPut(p.Key, tickets[j], Descriptor{}, errNotTried)
			continue
		case f.Err != nil:
			p.Size, p.Descriptor, p.Err = 0, Descriptor{}, keyError("put", p.Key, f.Err)
		case f.OK:
			d := f.Handle
			c.stats.put(from, to, PathRing, d.Size, start) // stats
			p.Size, p.Descriptor, p.Err = d.Size, Descriptor{HostRing: &d, Size: d.Size}, nil
			woken = true
		default: // refused (ring full): Put's per-key path
			p.Size, p.Descriptor, p.Err = c.put(from, to, p.Key, p.Payload, false)
		}
		failed = failed || p.Err != nil
		c.endPut(p.Key, tickets[j], p.Descriptor, p.Err)
	}
	if woken {
		c.published(to, true)
	}
	return tried, failed
}

// errNotTried settles a put admitted to the claims ledger that a run did
// not publish: the ledger records nothing for it.
var errNotTried = errors.New("connector: put not tried")
