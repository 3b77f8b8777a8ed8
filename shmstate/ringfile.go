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

// faultOf names the fault err reports ("" if none); ring's sentinels
// are the one place the faults are told apart.
func faultOf(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ring.ErrNotInitialized):
		return FaultNotWritten
	case errors.Is(err, ring.ErrBadMagic):
		return FaultBadMagic
	case errors.Is(err, ring.ErrCapacityMismatch):
		return FaultCapacity
	case errors.Is(err, ring.ErrPositions):
		return FaultPositions
	case errors.Is(err, ring.ErrFrame):
		return FaultFrame
	case errors.Is(err, ring.ErrCorrupt):
		return FaultNotRing
	case errors.As(err, &errno):
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
