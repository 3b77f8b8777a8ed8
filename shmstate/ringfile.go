//go:build linux

package shmstate

import (
	"errors"
	"syscall"

	"omnishm/ring"
)

// What is wrong with a ring file (Ring.Fault).
const (
	FaultNotWritten = "header not written yet" // zero magic: being made, or its maker died
	FaultBadMagic   = "bad magic"
	FaultCapacity   = "capacity mismatch" // header capacity vs file size, or unaligned
	FaultPositions  = "tail after head"   // or more used bytes than capacity
	FaultFrame      = "frame fault"       // a frame's size, bounds or key
	FaultNotRing    = "not a ring file"   // not a regular file, or too short or long
	FaultForeign    = "another user's file"
	faultOpenPrefix = "cannot open: "
)

// ringFaults pairs ring's sentinels with the faults they name, most
// specific first (ErrCorrupt wraps the others).
var ringFaults = []struct {
	err   error
	fault string
}{
	{ring.ErrNotInitialized, FaultNotWritten},
	{ring.ErrBadMagic, FaultBadMagic},
	{ring.ErrCapacityMismatch, FaultCapacity},
	{ring.ErrPositions, FaultPositions},
	{ring.ErrFrame, FaultFrame},
	{ring.ErrCorrupt, FaultNotRing},
}

// faultOf names the fault err reports ("" if none); ring's sentinels
// are the one place the faults are told apart.
func faultOf(err error) string {
	if err == nil {
		return ""
	}
	for _, f := range ringFaults {
		if errors.Is(err, f.err) {
			return f.fault
		}
	}
	if errno, ok := errors.AsType[syscall.Errno](err); ok {
		return faultOpenPrefix + errno.Error()
	}
	return err.Error()
}

// maxReadyKeys bounds how many ready keys a summary keeps: a view, not a dump.
const maxReadyKeys = 8

// ringCounts is what a ring's live window holds.
type ringCounts struct {
	ready, done int
	readyKeys   []string // the first maxReadyKeys, in position order
}

// countFrames summarises the frames ring.Parse listed from tail to head;
// padding frames are neither ready nor done payloads.
func countFrames(frames []ring.FrameInfo) ringCounts {
	c := ringCounts{readyKeys: []string{}}
	for _, f := range frames {
		switch {
		case f.Kind != ring.KindBytes && f.Kind != ring.KindTensors: // padding
		case f.Done:
			c.done++
		default:
			c.ready++
			if len(c.readyKeys) < maxReadyKeys {
				c.readyKeys = append(c.readyKeys, f.Key)
			}
		}
	}
	return c
}

// marks keeps what a Tracker needs of each frame ring.Parse listed.
func marks(frames []ring.FrameInfo) []frameMark {
	out := make([]frameMark, len(frames))
	for i, f := range frames {
		out[i] = frameMark{pos: f.Position, total: f.Total, done: f.Done,
			padding: f.Kind != ring.KindBytes && f.Kind != ring.KindTensors}
	}
	return out
}
