//go:build linux

// Package natsconn is the remote edge of a pipeline: a connector.Transport
// between stages on different hosts, over NATS JetStream. It behaves as the
// shared-memory connector does (SPEC §9) and carries the same payload bytes
// (the msgpack form, or a tensor frame when the payload has tensors), so a
// tensor crosses hosts with no JSON step.
//
// Each publication is the entry from.to.key of a key-value bucket (see
// EncodeKey), holding the payload bytes with their kind in a header or, for
// a payload above the server's maximum message size, pointing at an object
// of the object store that holds them in chunks. The bucket keeps one message
// per entry, so a put replaces an unclaimed publication of its key. A
// receiver claims a publication by a purge that the server accepts only if
// the entry's last revision is the one the receiver read: of several
// receivers, in any processes on any hosts, exactly one succeeds. A
// descriptor names the revision, so a stale one never claims a newer
// publication. Recv waits on a watch of its stage's entries, never polling;
// a receive of a publication the watch already delivered claims it at once.
//
// A put or a claim whose acknowledgement is lost to a dropped connection or
// a restarting server is resolved by asking the server, once it answers
// again, what the key's last message is (the put itself, or the marker of
// the claim that took it), so a server restart or a cluster node going away
// loses no acknowledged put and claims none twice. Each operation waits for the server at most
// Options.Timeout, then fails with ErrUnreachable. Unclaimed payloads expire
// after Options.MaxAge; Close retires the connector's own first, as the
// shared-memory connector does.
//
// A producer learns what became of a publication from Claimed, or waits
// for its claim with WaitClaimed, which watches the entry for the claim's
// marker. StartEmbedded runs a server in the calling process, for tests,
// benchmarks and single-host demonstrations.
//
// Importing the package registers config.NatsConnector with connector.New.
// The server must run JetStream (nats-server 2.11 or later: claim markers
// expire through per-message TTLs).
//
// It builds on Linux only (build tag linux), as it needs package connector, whose Transport it implements.
package natsconn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/keys"
)

// Defaults of Options' zero fields.
const (
	DefaultURL     = nats.DefaultURL // nats://127.0.0.1:4222
	DefaultBucket  = "omnishm"
	DefaultMaxAge  = 10 * time.Minute
	DefaultTimeout = 5 * time.Second
)

// ErrUnreachable is returned (wrapped, with the error that ended the wait)
// when the server cannot be reached, or does not answer, within the
// operation's timeout. A put that fails with it may still have been stored:
// put the key again to replace it, or let it expire.
var ErrUnreachable = errors.New("natsconn: NATS server unreachable")

// ErrClosed is connector.ErrClosed: operations on a closed connector.
var ErrClosed = connector.ErrClosed

// Options configure a connector. The zero value connects to DefaultURL.
type Options struct {
	// Nats holds the server, bucket and storage settings, as a
	// configuration's extra mapping gives them (see OptionsFrom); a zero
	// field means its default.
	config.Nats
	// StageID is this endpoint's stage: Recv receives on edges into it.
	// Open refuses a malformed one (connector.ErrBadStage).
	StageID connector.Stage
}

func (o Options) withDefaults() Options {
	if o.URL == "" {
		o.URL = DefaultURL
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.ObjectStore == "" {
		o.ObjectStore = o.Bucket + "_large"
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	return o
}

// Connector is the NATS JetStream transport. It is safe for concurrent use
// by many goroutines.
type Connector struct {
	opts       Options
	nc         *nats.Conn
	js         jetstream.JetStream
	stream     jetstream.Stream // the bucket's
	streamName string
	prefix     string // of the bucket's subjects: $KV.{bucket}.
	objects    jetstream.ObjectStore
	markerTTL  time.Duration
	link       *link

	pending *pendingSet
	retired *retiredSet // what this connector retired, for Claimed
	// claimStep, set by tests before a WaitClaimed, is called at the steps
	// of its wait (see claimStep), so a test can force an order of its
	// watch and its check of the subject.
	claimStep func(step claimStep, seq uint64)

	backgroundMu   sync.Mutex
	background     sync.WaitGroup // object deletions
	backgroundDone bool           // Close waits for them: no more

	watchMu sync.Mutex // serialises starting the watch
	watcher atomic.Pointer[watcher]

	closeOnce sync.Once
	closed    atomic.Bool

	puts, gets, bytes, objectPuts, objectGets, claimsLost, reconnects atomic.Uint64
	asleep                                                            atomic.Int32 // Recv calls waiting on the watch
}

// Open connects to the server and creates (or updates to opts) the bucket
// and the object store. It fails with ErrUnreachable if the server does not
// answer within opts.Timeout.
func Open(opts Options) (*Connector, error) {
	if opts.StageID != connector.NoStage {
		if _, err := connector.ParseStage(string(opts.StageID)); err != nil {
			return nil, fmt.Errorf("natsconn: open: %w", err)
		}
	}
	if err := opts.Nats.Validate(); err != nil {
		return nil, fmt.Errorf("natsconn: open: %w", err)
	}
	opts = opts.withDefaults()
	c := &Connector{
		opts:       opts,
		link:       newLink(),
		pending:    newPendingSet(),
		retired:    newRetiredSet(),
		streamName: "KV_" + opts.Bucket,
		prefix:     "$KV." + opts.Bucket + ".",
		// A marker must outlive any retry that may need to read it, and
		// the server's window of remembered message ids.
		markerTTL: max(time.Second, min(opts.MaxAge, 2*time.Minute, 4*opts.Timeout)),
	}
	natsOpts := []nats.Option{
		nats.Name("omnishm"),
		nats.Timeout(opts.Timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		// No buffering while disconnected: a publish that cannot be sent
		// fails at once and publish waits for the connection instead, so
		// nothing reaches the server after its Put has given up.
		nats.ReconnectBufSize(-1),
		nats.PingInterval(opts.Timeout),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { c.link.set(false) }),
		nats.ReconnectHandler(func(*nats.Conn) { c.reconnects.Add(1); c.link.set(true) }),
		nats.ClosedHandler(func(*nats.Conn) { c.link.close() }),
	}
	if opts.Credentials != "" {
		natsOpts = append(natsOpts, nats.UserCredentials(opts.Credentials))
	}
	var err error
	if c.nc, err = nats.Connect(opts.URL, natsOpts...); err != nil {
		if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || isNetError(err) {
			return nil, fmt.Errorf("natsconn: connect %s: %w: %w", opts.URL, ErrUnreachable, err)
		}
		return nil, fmt.Errorf("natsconn: connect %s: %w", opts.URL, err)
	}
	if err := c.setup(); err != nil {
		c.nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *Connector) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	var err error
	// An acknowledgement lost with a connection fails its object put after
	// one attempt's time instead of holding it for the whole timeout.
	if c.js, err = jetstream.New(c.nc, jetstream.WithPublishAsyncTimeout(min(c.opts.Timeout, attemptBase))); err != nil {
		return fmt.Errorf("natsconn: %w", err)
	}
	storage := jetstream.FileStorage
	if c.opts.Storage == "memory" {
		storage = jetstream.MemoryStorage
	}
	err = whilePlacing(ctx, func() error {
		_, err := c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         c.opts.Bucket,
			History:        1,
			TTL:            c.opts.MaxAge,
			Storage:        storage,
			Replicas:       c.opts.Replicas,
			LimitMarkerTTL: c.markerTTL,
		})
		return err
	})
	if err != nil {
		return setupError(ctx, "bucket "+c.opts.Bucket, err)
	}
	if c.stream, err = c.js.Stream(ctx, c.streamName); err != nil {
		return setupError(ctx, "bucket "+c.opts.Bucket, err)
	}
	err = whilePlacing(ctx, func() error {
		var err error
		c.objects, err = c.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:   c.opts.ObjectStore,
			TTL:      c.opts.MaxAge,
			Storage:  storage,
			Replicas: c.opts.Replicas,
		})
		return err
	})
	if err != nil {
		return setupError(ctx, "object store "+c.opts.ObjectStore, err)
	}
	return nil
}

// jsNoPeers is JetStream's "no suitable peers for placement": a cluster
// still forming, or a peer briefly seen offline, refuses a replicated
// stream for a moment.
const jsNoPeers jetstream.ErrorCode = 10005

// whilePlacing runs create until it succeeds, fails for another reason, or
// ctx ends: a connector opened while its cluster is forming waits for it,
// within Options.Timeout, instead of failing at once.
func whilePlacing(ctx context.Context, create func() error) error {
	backoff := 20 * time.Millisecond
	for {
		err := create()
		var jsErr jetstream.JetStreamError
		if err == nil || !errors.As(err, &jsErr) || jsErr.APIError() == nil || jsErr.APIError().ErrorCode != jsNoPeers {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func setupError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("natsconn: %s: %w: %w", what, ErrUnreachable, err)
	}
	return fmt.Errorf("natsconn: %s: %w", what, err)
}

func isNetError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne)
}

func (c *Connector) subject(from, to, key string) string {
	return c.prefix + EncodeKey(from, to, key)
}

// opContext bounds one operation moving bytes by the configured timeout,
// plus the time those bytes take at attemptRate: the timeout is how long to
// wait for a server that does not answer, not for a large transfer.
func (c *Connector) opContext(bytes int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.opts.Timeout+transferTime(bytes))
}

// Put implements connector.Transport: it returns once the server has
// acknowledged the publication. The payload is encoded into a buffer of the
// connector's own first, so the caller may reuse its buffers at once. It
// replaces an unclaimed publication of key on the edge.
func (c *Connector) Put(from, to, key string, payload any) (int, connector.Descriptor, error) {
	if c.closed.Load() {
		return 0, connector.Descriptor{}, ErrClosed
	}
	if err := keys.Check(key); err != nil {
		return 0, connector.Descriptor{}, err
	}
	data, kind, err := encode(payload)
	if err != nil {
		return 0, connector.Descriptor{}, fmt.Errorf("natsconn: put %q: %w", key, err)
	}
	ctx, cancel := c.opContext(len(data))
	defer cancel()
	subject := c.subject(from, to, key)
	id := newID()
	var obj *jetstream.ObjectInfo
	if len(data) > c.inlineLimit() {
		if obj, err = c.putObject(ctx, id, data); err != nil {
			return 0, connector.Descriptor{}, fmt.Errorf("natsconn: put %q: object: %w", key, err)
		}
	}
	msg := publicationMsg(subject, kind, data, obj)
	// Replacing an earlier publication of ours in the object store: the
	// put expects that one to be the entry's last, so that a success proves
	// nobody claimed it and its object can go. Otherwise the claimer reads
	// the object, and the put is made again without the expectation.
	prev, hadPrev := c.pending.get(subject)
	var expect uint64
	if hadPrev && prev.object != "" {
		expect = prev.seq
	}
	st, err := c.publish(ctx, msg, id, expect)
	if errors.Is(err, errConflict) {
		hadPrev = false
		st, err = c.publish(ctx, msg, id, 0)
	}
	if err != nil {
		// An entry the server refused points nowhere; one it may have stored
		// without saying so keeps its object, which expires with it.
		if obj != nil && !errors.Is(err, ErrUnreachable) {
			c.dropObject(obj.Name)
		}
		return 0, connector.Descriptor{}, fmt.Errorf("natsconn: put %q: %w", key, err)
	}
	if hadPrev && prev.object != "" {
		c.dropObject(prev.object)
	}
	if !st.claimed {
		now := time.Now()
		p := pendingPut{key: key, subject: subject, seq: st.seq, id: id, object: objectName(obj), at: now}
		c.pending.add(p, now.Add(-c.opts.MaxAge))
		if c.closed.Load() {
			// Close ran meanwhile and did not see this put: retire it here.
			c.pending.forget(subject, st.seq)
			c.retireAll([]pendingPut{p}, byClose)
			return 0, connector.Descriptor{}, ErrClosed
		}
	}
	c.puts.Add(1)
	c.bytes.Add(uint64(len(data)))
	if obj != nil {
		c.objectPuts.Add(1)
	}
	h := &descriptor.NatsHandle{Bucket: c.opts.Bucket, Key: EncodeKey(from, to, key), Revision: st.seq, Size: len(data), Object: objectName(obj)}
	return len(data), connector.Descriptor{Nats: h, Size: len(data)}, nil
}

func objectName(obj *jetstream.ObjectInfo) string {
	if obj == nil {
		return ""
	}
	return obj.Name
}

// Get implements connector.Transport: it claims the publication of key on
// edge from->to. With a descriptor it claims only that publication (its
// revision); a descriptor of another bucket or key is a miss.
func (c *Connector) Get(from, to, key string, desc *connector.Descriptor) (any, int, bool, error) {
	ctx, cancel := c.opContext(0)
	defer cancel()
	return c.get(ctx, from, to, key, desc)
}

// GetWithDeadline implements connector.Transport: once deadline has passed
// it misses without asking the server; before, it waits for the server
// until the deadline at most.
func (c *Connector) GetWithDeadline(from, to, key string, desc *connector.Descriptor, deadline time.Time) (any, int, bool, error) {
	if !time.Now().Before(deadline) {
		return nil, 0, false, nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return c.GetContext(ctx, from, to, key, desc)
}

// GetContext implements connector.Transport: a done ctx is a miss, and the
// wait for the server ends with ctx (or the configured timeout) as a miss
// too when the server is slow, or ErrUnreachable when it is gone.
func (c *Connector) GetContext(ctx context.Context, from, to, key string, desc *connector.Descriptor) (any, int, bool, error) {
	if ctx.Err() != nil {
		return nil, 0, false, nil
	}
	sub, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	v, size, ok, err := c.get(sub, from, to, key, desc)
	if err != nil && ctx.Err() != nil {
		return nil, 0, false, nil // the caller's context ended the wait
	}
	return v, size, ok, err
}

// maxGetRounds bounds Get's re-reads after lost claims: each one follows a
// newer put of the key, which a steady producer could make forever.
const maxGetRounds = 8

func (c *Connector) get(ctx context.Context, from, to, key string, desc *connector.Descriptor) (any, int, bool, error) {
	if c.closed.Load() {
		return nil, 0, false, ErrClosed
	}
	if err := keys.Check(key); err != nil {
		return nil, 0, false, err
	}
	var want uint64
	if desc != nil {
		if desc.Nats == nil {
			return nil, 0, false, fmt.Errorf("%w: not a nats descriptor: %v", descriptor.ErrBad, desc)
		}
		if desc.Nats.Bucket != c.opts.Bucket || desc.Nats.Key != EncodeKey(from, to, key) {
			return nil, 0, false, nil
		}
		want = desc.Nats.Revision
	}
	subject := c.subject(from, to, key)
	if w := c.currentWatcher(); w != nil {
		// Delivered by the watch already: claim it without reading it.
		if e, ok := w.remembered(subject); ok && (want == 0 || e.seq == want) {
			if v, size, ok, err := c.take(e); ok || err != nil {
				return v, size, ok, err
			}
		}
	}
	for range maxGetRounds {
		e, found, err := c.last(ctx, subject)
		if err != nil || !found || !e.publication() || (want != 0 && e.seq != want) {
			if err != nil {
				err = fmt.Errorf("natsconn: get %q: %w", key, err)
			}
			return nil, 0, false, err
		}
		v, size, ok, err := c.take(e)
		if ok || err != nil || want != 0 {
			return v, size, ok, err
		}
	}
	return nil, 0, false, nil
}

// last reads subject's last message (a direct get: any replica answers).
func (c *Connector) last(ctx context.Context, subject string) (e entry, found bool, err error) {
	err = c.retry(ctx, func(actx context.Context) error {
		m, err := c.stream.GetLastMsgForSubject(actx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			found = false
			return nil
		case err != nil:
			return err
		}
		e, found = entryOf(m), true
		return nil
	})
	return e, found, err
}

// take claims e and, if this connector won, returns its payload. Once the
// claim is sent it runs to its end under its own timeout, whatever the
// caller's context does, so a publication this connector won is never
// dropped for a context that ended meanwhile.
func (c *Connector) take(e entry) (any, int, bool, error) {
	size, _ := strconv.Atoi(e.header.Get(hdrSize)) // of an object; 0 inline
	ctx, cancel := c.opContext(size)
	defer cancel()
	won, err := c.retire(ctx, e.subject, e.seq, e.header.Get(jetstream.MsgIDHeader), "")
	if err != nil {
		return nil, 0, false, fmt.Errorf("natsconn: claim %s: %w", e.subject, err)
	}
	if !won {
		c.claimsLost.Add(1)
		return nil, 0, false, nil
	}
	// Ours now, whoever put it: a producer of this process forgets it, and
	// the watch lets go of its buffer, which decode may keep.
	c.pending.forget(e.subject, e.seq)
	if w := c.currentWatcher(); w != nil {
		w.forget(e.subject, e.seq+1)
	}
	data := e.data
	if e.header.Get(hdrObject) != "" {
		if data, err = c.getObject(ctx, e); err != nil {
			return nil, 0, false, fmt.Errorf("natsconn: get %s: %w", e.subject, err)
		}
		c.objectGets.Add(1)
		c.dropObject(e.header.Get(hdrObject))
	}
	v, err := decode(e.header.Get(hdrKind), data)
	if err != nil {
		return nil, 0, false, fmt.Errorf("natsconn: get %s: %w", e.subject, err)
	}
	c.gets.Add(1)
	return v, len(data), true, nil
}

// currentWatcher is the watch if it runs (Recv starts it).
func (c *Connector) currentWatcher() *watcher { return c.watcher.Load() }

// Stage implements connector.Receiver: the stage Recv receives into.
func (c *Connector) Stage() connector.Stage { return c.opts.StageID }

// Recv implements connector.Receiver: it blocks until key arrives on edge
// from->StageID, ctx ends (ctx.Err()), or the server has been unreachable
// for the configured timeout (ErrUnreachable). It sleeps on the watch of
// the stage's entries; it asks the server only when it starts, when a
// publication arrives, and after a reconnect. When ctx's deadline passes
// first the error is a *connector.RecvTimeoutError (errors.Is
// context.DeadlineExceeded), naming the bucket, stream and subject, whose
// Saw asks the server what the edge holds when it is first read.
func (c *Connector) Recv(ctx context.Context, from, key string) (any, int, error) {
	v, size, err := c.recv(ctx, from, key)
	if err != nil && err == ctx.Err() && errors.Is(err, context.DeadlineExceeded) {
		return nil, 0, c.recvTimeout(from, key, err)
	}
	return v, size, err
}

func (c *Connector) recv(ctx context.Context, from, key string) (any, int, error) {
	if c.opts.StageID == connector.NoStage {
		return nil, 0, fmt.Errorf("natsconn: recv %q: %w: this connector has no Options.StageID", keys.Shorten(key), connector.ErrBadStage)
	}
	if err := keys.Check(key); err != nil {
		return nil, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	w, err := c.watch(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, fmt.Errorf("natsconn: recv %q: %w", key, err)
	}
	subject := c.subject(from, string(c.opts.StageID), key)
	wt := w.register(subject)
	defer w.unregister(subject, wt)
	for {
		// Registered first: a put after this Get reaches the waiter.
		v, size, ok, err := c.GetContext(ctx, from, string(c.opts.StageID), key, nil)
		if err != nil || ok {
			return v, size, err
		}
		if v, size, ok, err := c.await(ctx, wt); ok || err != nil {
			return v, size, err
		}
	}
}

// await takes the publications the watcher hands to wt until one is won
// (ok), ctx ends, the connector closes or the server has been gone for the
// timeout (an error), or the connection came back (neither: Recv reads
// the entry again).
func (c *Connector) await(ctx context.Context, wt *waiter) (any, int, bool, error) {
	c.asleep.Add(1)
	defer c.asleep.Add(-1)
	gone := time.NewTimer(time.Hour)
	defer gone.Stop()
	for {
		up, closed, since, changed := c.link.state()
		if closed || c.closed.Load() {
			return nil, 0, false, ErrClosed
		}
		gone.Stop()
		if !up {
			gone.Reset(time.Until(since.Add(c.opts.Timeout)))
		}
		select {
		case e := <-wt.ch:
			if v, size, ok, err := c.take(e); ok || err != nil {
				return v, size, ok, err
			}
		case <-changed:
			if up, _, _, _ := c.link.state(); up {
				return nil, 0, false, nil
			}
		case <-gone.C:
			return nil, 0, false, c.unreachable(context.DeadlineExceeded)
		case <-ctx.Done():
			return nil, 0, false, ctx.Err()
		}
	}
}

// Cleanup implements connector.Transport: it retires this connector's
// unclaimed publications of key, on every edge, and reports whether it
// retired any.
func (c *Connector) Cleanup(key string) bool {
	return c.retireAll(c.pending.take(func(k string) bool { return k == key }), byCleanup) > 0
}

// CleanupPrefix implements connector.Transport: it retires this connector's
// unclaimed publications whose key is prefix followed by decimal digits only
// ("req_0_" matches "req_0_12", not "req_0_1x" nor "request_0_1") and
// returns how many.
func (c *Connector) CleanupPrefix(prefix string) int {
	return c.retireAll(c.pending.take(func(k string) bool {
		return keys.InPrefix(prefix, k)
	}), byCleanupPrefix)
}

// retireParallel bounds the retirements in flight at once.
const retireParallel = 32

// retireAll retires puts, concurrently, for the operation by, notes each
// retirement for Claimed and WaitClaimed, and returns how many were still
// unclaimed. A put some receiver claimed first is left to it.
func (c *Connector) retireAll(puts []pendingPut, by string) int {
	if len(puts) == 0 {
		return 0
	}
	ctx, cancel := c.opContext(0)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	slots := make(chan struct{}, retireParallel)
	for _, p := range puts {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if ok, _ := c.retire(ctx, p.subject, p.seq, p.id, by); ok {
				n.Add(1)
				c.retired.add(p.subject, p.seq, by)
				if p.object != "" {
					c.dropObject(p.object)
				}
			}
		}()
	}
	wg.Wait()
	return int(n.Load())
}

// Health implements connector.Transport. HostRing counters stay zero; the
// Remote ones count object-store payloads, lost claims and reconnects.
func (c *Connector) Health() connector.Health {
	return connector.Health{
		Puts:             c.puts.Load(),
		Gets:             c.gets.Load(),
		BytesTransferred: c.bytes.Load(),
		RemoteObjectPuts: c.objectPuts.Load(),
		RemoteObjectGets: c.objectGets.Load(),
		RemoteClaimsLost: c.claimsLost.Load(),
		RemoteReconnects: c.reconnects.Load(),
	}
}

// Close implements connector.Transport: it retires this connector's
// unclaimed publications, as the shared-memory connector does (within the
// timeout; what it cannot retire expires with MaxAge), stops the watch and
// closes the connection. It is idempotent.
func (c *Connector) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.retireAll(c.pending.take(nil), byClose)
		c.watchMu.Lock()
		if w := c.watcher.Load(); w != nil {
			w.stop()
		}
		c.watchMu.Unlock()
		c.backgroundMu.Lock()
		c.backgroundDone = true
		c.backgroundMu.Unlock()
		c.background.Wait()
		c.nc.Close()
	})
	return nil
}

// Options returns the connector's options, defaults filled in.
func (c *Connector) Options() Options { return c.opts }

var _ connector.Receiver = (*Connector)(nil)
