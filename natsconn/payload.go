//go:build linux

package natsconn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"omnishm/frame"
	"omnishm/wire"
)

// Payload kinds, as the ring's frame header has them (SPEC §3).
const (
	kindBytes   = "0" // the msgpack form (SPEC §5)
	kindTensors = "1" // a tensor frame (SPEC §4)
)

// headerRoom is what a publication's headers may take of the server's
// maximum message size: a payload that leaves less goes to the object store.
const headerRoom = 1 << 10

// ErrCorrupt is returned (wrapped) by receives of a publication whose bytes
// do not match what its entry says of them.
var ErrCorrupt = errors.New("natsconn: corrupt publication")

func newID() string { return nuid.Next() }

// encode lays out payload as the ring would (SPEC §9): a tensor frame when
// it has tensors, else its msgpack bytes. The result is a new buffer: the
// caller's tensors may change as soon as encode returns.
func encode(payload any) (data []byte, kind string, err error) {
	p, err := frame.Prepare(payload, 0)
	if err != nil {
		return nil, "", err
	}
	data = make([]byte, p.Size())
	if err := p.Write(data); err != nil {
		return nil, "", err
	}
	if p.Tensors() {
		return data, kindTensors, nil
	}
	return data, kindBytes, nil
}

// decode turns a publication's bytes, which the receiver owns (the client
// read them into a buffer of their own), into its payload: large tensors
// and bins keep that buffer instead of being copied again.
func decode(kind string, data []byte) (any, error) {
	switch kind {
	case kindTensors:
		return frame.DecodeOwned(data)
	case kindBytes:
		return wire.UnmarshalOwned(data)
	}
	return nil, fmt.Errorf("%w: payload kind %q", ErrCorrupt, kind)
}

// inlineLimit is the largest payload an entry holds itself.
func (c *Connector) inlineLimit() int {
	return int(c.nc.MaxPayload()) - headerRoom
}

// chunkSize is the object store's chunk: as large as a message may be, so a
// payload takes as few messages as it can.
func (c *Connector) chunkSize() uint32 {
	return uint32(max(min(c.inlineLimit(), 8<<20), 1<<10))
}

// putObject stores data as the object name, retrying a put that a dropped
// connection interrupted (a retry replaces whatever the first left).
func (c *Connector) putObject(ctx context.Context, name string, data []byte) (*jetstream.ObjectInfo, error) {
	backoff := minBackoff
	for {
		meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: c.chunkSize()}}
		actx, cancel := c.attempt(ctx, len(data))
		info, err := c.objects.Put(actx, meta, bytes.NewReader(data))
		cancel()
		if err == nil {
			return info, nil
		}
		if c.closed.Load() {
			return nil, ErrClosed
		}
		if perr := c.link.pause(ctx, &backoff); perr != nil {
			return nil, c.unreachable(errors.Join(perr, err))
		}
	}
}

// getObject reads the object that e points at into a buffer of its size,
// checking its size and SHA-256 digest against the entry's.
func (c *Connector) getObject(ctx context.Context, e entry) ([]byte, error) {
	name := e.header.Get(hdrObject)
	size, err := strconv.Atoi(e.header.Get(hdrSize))
	if err != nil || size < 0 {
		return nil, fmt.Errorf("%w: object %s: size %q", ErrCorrupt, name, e.header.Get(hdrSize))
	}
	backoff := minBackoff
	for {
		actx, cancel := c.attempt(ctx, size)
		data, err := c.readObject(actx, name, size, e.header.Get(hdrDigest))
		cancel()
		if err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, jetstream.ErrObjectNotFound) {
			return data, err
		}
		if c.closed.Load() {
			return nil, ErrClosed
		}
		if perr := c.link.pause(ctx, &backoff); perr != nil {
			return nil, c.unreachable(errors.Join(perr, err))
		}
	}
}

func (c *Connector) readObject(ctx context.Context, name string, size int, digest string) ([]byte, error) {
	r, err := c.objects.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	info, err := r.Info()
	if err != nil {
		return nil, err
	}
	if info.Size != uint64(size) || info.Digest != digest {
		return nil, fmt.Errorf("%w: object %s is %d bytes %s, its entry says %d bytes %s", ErrCorrupt, name, info.Size, info.Digest, size, digest)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, err
	}
	// The client checks the digest of what it read at the end of the object.
	var one [1]byte
	if n, err := r.Read(one[:]); n != 0 || err != io.EOF {
		if errors.Is(err, jetstream.ErrDigestMismatch) {
			return nil, fmt.Errorf("%w: object %s: %w", ErrCorrupt, name, err)
		}
		return nil, fmt.Errorf("natsconn: object %s: no end after %d bytes: %v", name, size, err)
	}
	return data, nil
}

// dropObject deletes an object nobody can claim any more, in the
// background: it expires with the store's max age if this fails.
func (c *Connector) dropObject(name string) {
	c.backgroundMu.Lock()
	defer c.backgroundMu.Unlock()
	if c.backgroundDone {
		return // Close is waiting for the others
	}
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		defer cancel()
		c.objects.Delete(ctx, name)
	}()
}

// publicationMsg is the entry message of a payload: its bytes, or for one
// in the object store, the object's name, size and digest.
func publicationMsg(subject, kind string, data []byte, obj *jetstream.ObjectInfo) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(hdrKind, kind)
	if obj == nil {
		m.Data = data
		return m
	}
	m.Header.Set(hdrObject, obj.Name)
	m.Header.Set(hdrSize, strconv.Itoa(len(data)))
	m.Header.Set(hdrDigest, obj.Digest)
	return m
}
