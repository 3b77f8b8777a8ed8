//go:build linux

package natsconn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of the bucket's messages. A publication carries its payload kind
// (SPEC §3's 0 for msgpack bytes, 1 for a tensor frame) and, when its bytes
// are in the object store, the object's name, size and digest. A marker is
// the KV protocol's purge (the key reads as deleted in any NATS tool) and
// names the publication it retired, so a producer whose acknowledgement was
// lost can still tell that its put was stored and claimed, and a producer
// waiting for the claim learns it (a marker of its producer's retirement
// says which operation made it, hdrRetiredBy).
const (
	hdrKind            = "Omnishm-Kind"
	hdrObject          = "Omnishm-Object"
	hdrSize            = "Omnishm-Size"
	hdrDigest          = "Omnishm-Digest"
	hdrClaimed         = "Omnishm-Claimed"
	hdrClaimedRevision = "Omnishm-Claimed-Revision"
	hdrRetiredBy       = "Omnishm-Retired-By"
	hdrOperation       = "KV-Operation"
	opPurge            = "PURGE"
)

// entry is one message of the bucket: a publication or a marker.
type entry struct {
	subject string
	seq     uint64
	header  nats.Header
	data    []byte
}

// publication reports whether e is a payload put by a connector, rather
// than a marker (ours, the server's for an expired payload, or a KV tool's).
func (e entry) publication() bool {
	return e.header.Get(hdrKind) != "" && e.header.Get(hdrOperation) == "" && e.header.Get(jetstream.MarkerReasonHeader) == ""
}

func entryOf(m *jetstream.RawStreamMsg) entry {
	return entry{subject: m.Subject, seq: m.Sequence, header: m.Header, data: m.Data}
}

// consumed is the entry a consumer delivered; false for a message that is
// not the stream's (no metadata).
func consumed(m jetstream.Msg) (entry, bool) {
	meta, err := m.Metadata()
	if err != nil {
		return entry{}, false
	}
	return entry{subject: m.Subject(), seq: meta.Sequence.Stream, header: m.Headers(), data: m.Data()}, true
}

// errConflict is publish's answer when the subject's last message was not
// the expected one: the publication was claimed, retired or replaced first.
var errConflict = errors.New("natsconn: publication already claimed or replaced")

// stored is where a publish ended up.
type stored struct {
	seq uint64
	// claimed is set when the acknowledgement was lost and, by the time the
	// server was asked, a receiver had already claimed the publication.
	claimed bool
}

// publish stores m (whose message id is id) and returns its sequence. With
// expect > 0 the subject's last message must be that sequence, else
// errConflict. An answer lost to a dropped connection or a restarting
// server is not guessed at: once the server answers again, the subject's
// last message says whether m was stored (it carries id, or it is the marker
// of the claim that took m), and only if not is m sent again. A resend of a
// stored m cannot store it twice either: the server drops a repeated id.
func (c *Connector) publish(ctx context.Context, m *nats.Msg, id string, expect uint64, opts ...jetstream.PublishOpt) (stored, error) {
	opts = append(opts, jetstream.WithMsgID(id))
	// The client writes its options into m's headers: an expectation of an
	// earlier call on m must not stay.
	m.Header.Del(jetstream.ExpectedLastSubjSeqHeader)
	if expect > 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(expect))
	}
	uncertain := false
	backoff := minBackoff
	for {
		actx, cancel := c.attempt(ctx, len(m.Data))
		ack, err := c.js.PublishMsg(actx, m, opts...)
		cancel()
		switch {
		case err == nil:
			return stored{seq: ack.Sequence}, nil
		case conflict(err) && !uncertain:
			return stored{}, errConflict
		case conflict(err):
			// A lost answer may have been ours: the subject says.
			if s, ours, rerr := c.resolve(ctx, m.Subject, id); rerr == nil {
				if ours {
					return s, nil
				}
				return stored{}, errConflict
			}
		case refused(err):
			return stored{}, err // nothing was stored
		case c.closed.Load():
			return stored{}, ErrClosed
		default:
			uncertain = true
		}
		if perr := c.link.pause(ctx, &backoff); perr != nil {
			return stored{}, c.unreachable(errors.Join(perr, err))
		}
		if uncertain {
			if s, ours, err := c.resolve(ctx, m.Subject, id); err == nil && ours {
				return s, nil
			}
		}
	}
}

// refused reports an error by which the server (or the client, for a
// message it cannot send) refused a request for good. A server that is
// only unavailable for the moment (503: electing a leader, recovering)
// is retried.
func refused(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code != 503
	}
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject)
}

func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// resolve reads the subject's last message on the stream's leader and
// reports whether it shows the message with id stored.
func (c *Connector) resolve(ctx context.Context, subject, id string) (stored, bool, error) {
	actx, cancel := c.attempt(ctx, 0)
	defer cancel()
	e, found, err := c.lastOnLeader(actx, subject)
	if err != nil || !found {
		return stored{}, false, err
	}
	if e.header.Get(jetstream.MsgIDHeader) == id {
		return stored{seq: e.seq}, true, nil
	}
	if e.header.Get(hdrClaimed) == id {
		seq, _ := strconv.ParseUint(e.header.Get(hdrClaimedRevision), 10, 64)
		return stored{seq: seq, claimed: true}, true, nil
	}
	return stored{}, false, nil
}

// lastOnLeader is the stream's message-get API, which its leader answers.
// Direct gets (what Get uses) may be answered by a replica that lags; that
// only costs a miss or a failed claim there, but deciding whether a put was
// stored needs the leader's word.
func (c *Connector) lastOnLeader(ctx context.Context, subject string) (entry, bool, error) {
	req, _ := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	msg, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+c.streamName, req)
	if err != nil {
		return entry{}, false, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return entry{}, false, fmt.Errorf("natsconn: message get: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return entry{}, false, nil
	case resp.Error != nil:
		return entry{}, false, resp.Error
	case resp.Message == nil:
		return entry{}, false, errors.New("natsconn: message get: empty answer")
	}
	e := entry{subject: resp.Message.Subject, seq: resp.Message.Seq, data: resp.Message.Data, header: nats.Header{}}
	if len(resp.Message.Header) > 0 {
		if e.header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return entry{}, false, fmt.Errorf("natsconn: message get: %w", err)
		}
	}
	return e, true, nil
}

// retire publishes the marker that ends the publication at seq (whose id is
// pubID): a purge that the server accepts only while seq is still the
// subject's last message, so of all the receivers and cleanups that try,
// exactly one succeeds. It reports whether this one did. by is "" for a
// receiver's claim, else the producer's operation that retires it.
func (c *Connector) retire(ctx context.Context, subject string, seq uint64, pubID, by string) (bool, error) {
	// The bucket keeps one message per key, so the marker replaces the
	// publication without a rollup.
	m := nats.NewMsg(subject)
	m.Header.Set(hdrOperation, opPurge)
	m.Header.Set(hdrClaimed, pubID)
	m.Header.Set(hdrClaimedRevision, strconv.FormatUint(seq, 10))
	if by != "" {
		m.Header.Set(hdrRetiredBy, by)
	}
	_, err := c.publish(ctx, m, newID(), seq, jetstream.WithMsgTTL(c.markerTTL))
	if errors.Is(err, errConflict) {
		return false, nil
	}
	return err == nil, err
}

// attemptBase bounds one request to the server, plus time for its bytes
// at attemptRate: a request written to a connection that is dying is never
// answered, and must cost one attempt, not the whole operation's timeout.
const (
	attemptBase = 2 * time.Second
	attemptRate = 32 << 20 // bytes per second
)

func (c *Connector) attempt(ctx context.Context, bytes int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(c.opts.Timeout, attemptBase)+transferTime(bytes))
}

func transferTime(bytes int) time.Duration {
	return time.Duration(int64(bytes) * int64(time.Second) / attemptRate)
}

// retry runs op, each attempt bounded as attempt bounds it, until it
// succeeds or the server refuses it for good (its error), the connector
// closes (ErrClosed), or the wait for the server ends with ctx or the
// configured timeout (ErrUnreachable). op must be safe to repeat.
func (c *Connector) retry(ctx context.Context, op func(ctx context.Context) error) error {
	backoff := minBackoff
	for {
		actx, cancel := c.attempt(ctx, 0)
		err := op(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case c.closed.Load():
			return ErrClosed
		case refused(err):
			return err
		}
		if perr := c.link.pause(ctx, &backoff); perr != nil {
			return c.unreachable(errors.Join(perr, err))
		}
	}
}

// unreachable turns the error that ended a wait for the server into the
// one callers see.
func (c *Connector) unreachable(err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	up, _, since, _ := c.link.state()
	if !up {
		return fmt.Errorf("%w: %s (disconnected for %v): %w", ErrUnreachable, c.opts.URL, time.Since(since).Round(time.Millisecond), err)
	}
	return fmt.Errorf("%w: %s (no answer in time): %w", ErrUnreachable, c.opts.URL, err)
}
