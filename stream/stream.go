// Package stream carries chunk streams over a connector edge: a Sender puts
// the chunks of many requests in order from a bounded background queue, and a
// Reader yields one request's chunks in order until the finished chunk.
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
package stream

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

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
	// ErrBadRequest is returned for a request id or stage that cannot be part
	// of a chunk key.
	ErrBadRequest = errors.New("stream: bad request id")
	// ErrBadChunk is returned for a payload or a received chunk that is not a
	// map with an optional "meta" map.
	ErrBadChunk = errors.New("stream: bad chunk")
	// ErrSenderGone is returned by Reader.Next when the request's producer
	// made no progress within ReaderOptions.ProgressTimeout or its liveness
	// check says it is dead.
	ErrSenderGone = errors.New("stream: sender gone")
)

// Key is the connector key of chunk n of request on an edge from stage from:
// {request}_{from}_{n}.
func Key(request, from string, n int) string {
	return request + "_" + from + "_" + strconv.Itoa(n)
}

// Prefix is what every chunk key of request from stage from starts with, as
// passed to CleanupPrefix: it matches only the prefix followed by decimal
// digits (SPEC §9), so request "req-1" never reclaims "req-10"'s chunks.
func Prefix(request, from string) string { return request + "_" + from + "_" }

// checkName rejects ids that cannot be part of a key used as a file name
// (SPEC §1); the connector checks the whole key again.
func checkName(what, s string) error {
	if s == "" || strings.ContainsAny(s, "/\x00") {
		return fmt.Errorf("%w: %s %q", ErrBadRequest, what, s)
	}
	return nil
}

// newChunk builds the chunk put on the wire: a shallow copy of payload whose
// meta map (copied too, so the caller's map is left alone) has finished set.
func newChunk(payload map[string]any, finished bool) (map[string]any, error) {
	meta := map[string]any{}
	if m, ok := payload["meta"]; ok && m != nil {
		um, ok := m.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: meta is %T, want map[string]any", ErrBadChunk, m)
		}
		maps.Copy(meta, um)
	}
	meta["finished"] = tensor.Scalar(finished)
	chunk := make(map[string]any, len(payload)+1)
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
