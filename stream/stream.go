//go:build linux

// Package stream carries chunk streams over a connector edge: a Sender puts
// the chunks of many requests in order from a bounded background queue, and a
// Reader yields one request's chunks in order until the finished chunk; a
// Mux yields the chunks of many requests of one edge as they arrive.
//
// Keys are vLLM-Omni's chunk keys, {request}_{from}_{n} with n = 0, 1, 2, ...
// per request (SPEC §1), so a Python stage reads a Go stream and the other way
// round. Every chunk is a map carrying the typed payload's finish mark:
//
//	{<user fields>..., "meta": {<user meta fields>..., "finished": <0-d bool tensor>}}
//
// for example {"codes": {"audio": int64[1,28]}, "meta": {"finished": false}}.
// meta.finished is true in the last chunk of a request (Sender.Finish) and
// false in every other one, as vLLM-Omni's MetaStruct sets it.
//
// # Ownership
//
// A payload given to Send or Finish, and every tensor in it, is the
// Sender's until its chunk has been put (the connector copies it then);
// change it only after that, or send a copy. A chunk returned by
// Reader.Next is the caller's: nothing in it aliases shared memory. The
// transport stays the caller's: neither Sender nor Reader closes it.
//
// This package creates no file of its own. Each chunk is one publication of
// the connector (a ring frame or a per-key segment): a Reader's claim
// retires it, and Sender.Release retires the request's unclaimed ones
// through CleanupPrefix. Closing the producer's connector retires whatever
// is still unclaimed, so close the Sender first and the connector once the
// readers have drained.
//
// # A stopped sender
//
// A Reader given the producer's process (ReaderOptions.Sender, a proc.ID)
// watches it through a pidfd and ends with ErrSenderGone once it exits and
// its published chunks are read. Without it, a Reader over a connector that
// says who published a chunk (connector.MessageReceiver) watches the
// producer of the ring its last chunk came from the same way, within
// milliseconds of its death; ReaderOptions.ProgressTimeout is the last
// resort, for streams carried by per-key segments alone. Either way ctx
// ends a wait at once.
//
// # Errors
//
// The stream adds one layer of context, the request and chunk, to the
// connector's, which names the key:
//
//	stream: request "r" chunk 3: connector: put "r_0_3": segment: ...
//
// Branch with errors.Is on the sentinels below, connector.ErrBadStage for a
// stage id and connector.ErrClosed.
//
// It builds on Linux only (build tag linux), as it needs package connector.
package stream

import (
	"errors"
	"fmt"
	"maps"
	"strconv"

	"omnishm/connector"
	"omnishm/keys"
	"omnishm/tensor"
)

var (
	// ErrQueueFull is returned by Send and Finish when the queue holds
	// SenderOptions.QueueLimit chunks and SenderOptions.FailWhenFull is set.
	ErrQueueFull = errors.New("stream: send queue full")
	// ErrClosed is returned by Send and Finish after Close.
	ErrClosed = errors.New("stream: sender closed")
	// ErrFinished is returned by Send and Finish for a request that was
	// already finished and not yet released.
	ErrFinished = errors.New("stream: request already finished")
	// ErrBadRequest is returned for a request id that cannot be part of a
	// chunk key; it wraps keys.ErrBadKey saying why. (A bad stage id wraps
	// connector.ErrBadStage.)
	ErrBadRequest = errors.New("stream: bad request id")
	// ErrBadChunk is returned for a payload or a received chunk that is not a
	// map with an optional "meta" map.
	ErrBadChunk = errors.New("stream: bad chunk")
	// ErrSenderGone is returned by Reader.Next when the request's producer
	// exited (ReaderOptions.Sender) or made no progress within
	// ReaderOptions.ProgressTimeout. Its message says what the reader saw:
	// the last chunk received and how long ago, and whose exit it watched
	// for (the sender, the producer of the chunks' ring, or none known).
	ErrSenderGone = errors.New("stream: sender gone")
)

// Key is the connector key of chunk n of request on an edge from stage from:
// {request}_{from}_{n}.
func Key(request, from string, n int) string {
	// Built in a stack buffer: one allocation, the string, where the
	// concatenation made two from chunk 100 on (strconv.Itoa's string).
	var buf [64]byte
	b := append(append(append(append(buf[:0], request...), '_'), from...), '_')
	return string(strconv.AppendInt(b, int64(n), 10))
}

// Prefix is what every chunk key of request from stage from starts with, as
// passed to CleanupPrefix: it matches only the prefix followed by decimal
// digits (SPEC §9), so request "req-1" never reclaims "req-10"'s chunks.
func Prefix(request, from string) string { return request + "_" + from + "_" }

// checkEdge refuses stage ids that are not stages (connector.ParseStage
// is their one validator), before anything is sent or read.
func checkEdge(from, to string) error {
	for _, s := range []string{from, to} {
		if _, err := connector.ParseStage(s); err != nil {
			return fmt.Errorf("stream: edge %q->%q: %w", from, to, err)
		}
	}
	return nil
}

// checkRequest refuses a request id whose chunk keys cannot name a
// publication, by asking the key rules' one owner about its first key,
// which it returns (a Reader's first wait is for it).
func checkRequest(request, from string) (first string, err error) {
	if request == "" {
		return "", fmt.Errorf("%w: empty", ErrBadRequest)
	}
	first = Key(request, from, 0)
	if err := keys.Check(first); err != nil {
		return "", fmt.Errorf("%w %q: %w", ErrBadRequest, keys.Shorten(request), err)
	}
	return first, nil
}

// bareMeta are the meta maps of payloads without meta fields of their own,
// for finished false and true: shared and never written, as the chunks
// that carry them are only encoded, so a chunk costs no meta map and mark
// of its own.
var bareMeta = [2]map[string]any{
	{"finished": tensor.Scalar(false)},
	{"finished": tensor.Scalar(true)},
}

// newChunk builds the chunk put on the wire: a shallow copy of payload whose
// meta map (copied too, so the caller's map is left alone) has finished set.
// It must not be written to: without user meta fields, its meta map is one
// of bareMeta.
func newChunk(payload map[string]any, finished bool) (map[string]any, error) {
	return newChunkInto(nil, payload, finished)
}

// newChunkInto is newChunk into chunk, an empty map of an earlier chunk
// (nil: a new map), whose memory it reuses.
func newChunkInto(chunk, payload map[string]any, finished bool) (map[string]any, error) {
	var meta map[string]any
	switch m := payload["meta"].(type) {
	case nil:
		meta = bareMeta[0]
		if finished {
			meta = bareMeta[1]
		}
	case map[string]any:
		meta = make(map[string]any, len(m)+1)
		maps.Copy(meta, m)
		meta["finished"] = tensor.Scalar(finished)
	default:
		return nil, fmt.Errorf("%w: meta is %T, want map[string]any", ErrBadChunk, m)
	}
	if chunk == nil {
		chunk = make(map[string]any, len(payload)+1)
	}
	maps.Copy(chunk, payload)
	chunk["meta"] = meta
	return chunk, nil
}

// Finished reports whether chunk carries meta.finished = true. The mark may
// be a 0-d (or one-element) bool tensor, as vLLM-Omni sends it, or a plain
// bool; a missing or unreadable mark counts as not finished.
func Finished(chunk map[string]any) bool {
	meta, ok := asMap(chunk["meta"])
	if !ok {
		return false
	}
	switch f := meta["finished"].(type) {
	case bool:
		return f
	case *tensor.Tensor:
		return tensorTrue(f)
	case tensor.Tensor:
		return tensorTrue(&f)
	}
	return false
}

func tensorTrue(t *tensor.Tensor) bool {
	return t != nil && t.DType == tensor.Bool && len(t.Data) == 1 && t.Data[0] != 0
}

// asMap accepts the map shapes a decoder may produce for a msgpack map.
func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			s, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[s] = v
		}
		return out, true
	}
	return nil, false
}
