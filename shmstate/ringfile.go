//go:build linux

package shmstate

import "omnishm/ring"

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
