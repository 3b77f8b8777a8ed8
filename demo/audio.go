//go:build linux

package demo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
)

// The demo's synthetic codec: pure functions, so stage 2 can recompute what
// stages 0 and 1 must have sent and check every sample.
const (
	codesPerChunk   = 28   // one [1, 28] int64 chunk of codec codes, as vLLM-Omni's talker emits
	codebookSize    = 2048 // codes are in [0, codebookSize)
	samplesPerCode  = 64   // audio samples synthesised from one code
	samplesPerChunk = codesPerChunk * samplesPerCode
	sampleRate      = 24000 // Hz, mono
	wavHeaderSize   = 44
)

// chunkCodes are the deterministic codes of chunk n of request r.
func chunkCodes(r, n int) []int64 { return chunkCodesInto(make([]int64, codesPerChunk), r, n) }

// chunkCodesInto is chunkCodes into codes, which it returns: the stages
// write each chunk's codes into memory they reuse.
func chunkCodesInto(codes []int64, r, n int) []int64 {
	for i := range codes {
		codes[i] = int64((r*7919 + n*131 + i*17 + (n*i)%13) % codebookSize)
	}
	return codes
}

// tones are the 48-semitone scale synthesize plays (110 Hz to ~1.7 kHz):
// per pitch, its frequency and the sine and cosine of k phase steps for
// each sample k of a tone, computed once rather than per code of every
// chunk, and scaled by the amplitude, 0.25 (a power of two: the samples
// are the same bits as scaling each sum).
var tones = func() (t [48]struct {
	freq float64
	step [samplesPerCode]toneStep
}) {
	for i := range t {
		t[i].freq = 110 * math.Pow(2, float64(i)/12)
		for k := range t[i].step {
			sin, cos := math.Sincos(2 * math.Pi * t[i].freq * float64(k) / sampleRate)
			t[i].step[k].sin, t[i].step[k].cos = amplitude*sin, amplitude*cos
		}
	}
	return t
}()

const amplitude = 0.25

// toneStep is a tone's sine and cosine of k phase steps, times the
// amplitude, for its sample k.
type toneStep struct{ sin, cos float64 }

// synthesize turns chunk n's codes into float32 samples: each code is a
// 64-sample tone whose pitch comes from the code. The phase follows the
// sample's position in the request, so the result depends only on
// (codes, n).
func synthesize(codes []int64, n int) []float32 {
	return synthesizeInto(nil, codes, n)
}

// synthesizeInto is synthesize into dst's memory, grown if need be: stage
// 2 checks every chunk against it without an allocation per chunk.
func synthesizeInto(dst []float32, codes []int64, n int) []float32 {
	out := slices.Grow(dst[:0], len(codes)*samplesPerCode)[:len(codes)*samplesPerCode]
	for i, c := range codes {
		tone := &tones[c%48]
		first := n*len(out) + i*samplesPerCode
		// sin(θ0 + kδ) = sin θ0 cos kδ + cos θ0 sin kδ from the table:
		// one Sincos per tone, and samples that do not wait on each
		// other (a rotation sample by sample did, and a Sin per sample
		// was a third of the demo's CPU).
		sin, cos := math.Sincos(2 * math.Pi * tone.freq * float64(first) / sampleRate)
		tone64 := (*[samplesPerCode]float32)(out[i*samplesPerCode:]) // sized as tone.step: no bounds checks
		// Four samples a step, through arrays: no bounds checks, and the
		// loop's own work (the step's address, the count) once for four
		// (a quarter less time per chunk than sample by sample).
		for k := 0; k < samplesPerCode; k += 4 {
			st, o := (*[4]toneStep)(tone.step[k:]), (*[4]float32)(tone64[k:])
			o[0] = float32(sin*st[0].cos + cos*st[0].sin)
			o[1] = float32(sin*st[1].cos + cos*st[1].sin)
			o[2] = float32(sin*st[2].cos + cos*st[2].sin)
			o[3] = float32(sin*st[3].cos + cos*st[3].sin)
		}
	}
	return out
}

// pcm16 appends x as 16-bit little-endian PCM, clamped to [-1, 1] and
// rounded half away from zero (as math.Round). x·32767 is exact in a
// float64, and it lies halfway between two integers only for x = ±0.5
// (32767 is odd), where rounding half to even gives the same ±16384: so
// adding 1.5·2⁵² and taking the low bits of the sum, which rounds half to
// even in one addition, rounds as math.Round does, without its cost (the
// conversion was a fifth of stage 2's CPU). A NaN sample is 0. Whole
// blocks of samples go through pcm16Blocks where the CPU has a vector
// kernel (pcm16_amd64.s); the rest, here.
func pcm16(dst []byte, x []float32) []byte {
	at := len(dst)
	dst = slices.Grow(dst, 2*len(x))[:at+2*len(x)]
	out := dst[at:]
	n := pcm16Blocks(out, x)
	pcm16Scalar(out[2*n:], x[n:])
	return dst
}

// pcm16Scalar is pcm16 sample by sample, into out[:2*len(x)].
func pcm16Scalar(out []byte, x []float32) {
	const roundBias = 1.5 * (1 << 52) // the sum's low mantissa bits are the rounded integer
	out = out[:2*len(x)]
	for i, v := range x {
		f := float64(v) * math.MaxInt16
		if f > math.MaxInt16 {
			f = math.MaxInt16
		} else if f < -math.MaxInt16 {
			f = -math.MaxInt16
		}
		binary.LittleEndian.PutUint16(out[2*i:2*i+2], uint16(math.Float64bits(f+roundBias)))
	}
}

// wavHeader is the 44-byte RIFF header of a mono 16-bit PCM file holding
// dataBytes of samples.
func wavHeader(dataBytes int) []byte {
	const channels, bits = 1, 16
	h := make([]byte, 0, wavHeaderSize)
	h = append(h, "RIFF"...)
	h = binary.LittleEndian.AppendUint32(h, uint32(36+dataBytes))
	h = append(h, "WAVEfmt "...)
	h = binary.LittleEndian.AppendUint32(h, 16) // fmt chunk size
	h = binary.LittleEndian.AppendUint16(h, 1)  // PCM
	h = binary.LittleEndian.AppendUint16(h, channels)
	h = binary.LittleEndian.AppendUint32(h, sampleRate)
	h = binary.LittleEndian.AppendUint32(h, sampleRate*channels*bits/8)
	h = binary.LittleEndian.AppendUint16(h, channels*bits/8)
	h = binary.LittleEndian.AppendUint16(h, bits)
	h = append(h, "data"...)
	return binary.LittleEndian.AppendUint32(h, uint32(dataBytes))
}

var errBadWAV = errors.New("not a mono 16-bit PCM WAV file")

// wavSamples checks b is the file wavHeader and pcm16 make and returns its
// sample count.
func wavSamples(b []byte) (int, error) {
	if len(b) < wavHeaderSize {
		return 0, fmt.Errorf("%w: %d bytes", errBadWAV, len(b))
	}
	data := int(binary.LittleEndian.Uint32(b[40:44]))
	if want := wavHeader(data); string(b[:wavHeaderSize]) != string(want) {
		return 0, fmt.Errorf("%w: header % x", errBadWAV, b[:wavHeaderSize])
	}
	if len(b) != wavHeaderSize+data || data%2 != 0 {
		return 0, fmt.Errorf("%w: %d data bytes in a %d-byte file", errBadWAV, data, len(b))
	}
	return data / 2, nil
}

// wavWriter streams 16-bit PCM to a file and writes the header last, when
// the sample count is known. It converts each chunk's samples straight
// into its write buffer (no copy from a PCM buffer into a bufio.Writer's),
// and writes the buffer out when it is full.
type wavWriter struct {
	f     *os.File
	bytes int    // PCM bytes written so far
	buf   []byte // PCM not yet written; its capacity is the write size
}

// wavBuffers bounds the write buffers of a run's WAV files together: each
// gets its share, between 4 KiB and 64 KiB (a chunk is 3.5 KiB of PCM, so
// at 4 KiB nearly every chunk was a write system call).
const wavBuffers = 8 << 20

// newWAVWriter creates the file at path, for one of requests files. Its
// buffer's pages are touched here, at setup: not faulted in by the first
// chunks.
func newWAVWriter(path string, requests int) (*wavWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	size := min(64<<10, max(4<<10, wavBuffers/max(1, requests)))
	w := &wavWriter{f: f, buf: make([]byte, size)}
	for i := range w.buf {
		w.buf[i] = 0 // the pages, faulted in before the clock starts
	}
	w.buf = w.buf[:wavHeaderSize] // zeros where the header goes at the end
	return w, nil
}

func (w *wavWriter) write(x []float32) error {
	if len(w.buf)+2*len(x) > cap(w.buf) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.buf = pcm16(w.buf, x) // grows the buffer only for a chunk larger than it
	w.bytes += 2 * len(x)
	return nil
}

func (w *wavWriter) flush() error {
	_, err := w.f.Write(w.buf)
	w.buf = w.buf[:0]
	return err
}

func (w *wavWriter) finish() error {
	err := w.flush()
	if err == nil {
		_, err = w.f.WriteAt(wavHeader(w.bytes), 0)
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("write wav: %w", err)
	}
	return nil
}

// abort closes a file that was not finished (no-op after finish).
func (w *wavWriter) abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}
