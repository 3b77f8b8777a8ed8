//go:build linux

package natsconn

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"omnishm/connector"
)

// Bounds of what a Recv timeout's Saw looks up: its wait for the server,
// the entries whose last message it reads, the names it lists.
const (
	sawBudget     = 2 * time.Second
	maxClassified = 16
	maxListed     = 3
)

// recvTimeout is the error of a Recv of key on edge from->StageID whose
// context's deadline passed (err): a connector.RecvTimeoutError naming the
// bucket, its stream and the key's subject, whose Saw asks the server what
// is there only when it is first read.
func (c *Connector) recvTimeout(from, key string, err error) error {
	to := string(c.opts.StageID)
	where := fmt.Sprintf("bucket %q, stream %s, subject %s", c.opts.Bucket, c.streamName, c.subject(from, to, key))
	return connector.NewRecvTimeoutError(where, from, to, key, err, func() string { return c.sawOnEdge(from, to, key) })
}

// sawOnEdge summarises what the bucket holds for key on edge from->to, for
// a timeout's message: the key's entry, the unclaimed publications of other
// keys on the edge and of the key on other edges, the other buckets; or why
// it cannot say (the server unreachable, the stream gone).
func (c *Connector) sawOnEdge(from, to, key string) string {
	if c.closed.Load() {
		return "nothing: the connector was closed before the error was read"
	}
	if up, _, since, _ := c.link.state(); !up {
		return fmt.Sprintf("nothing: the server is unreachable (%s disconnected for %v)", c.opts.URL, time.Since(since).Round(time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(c.opts.Timeout, sawBudget))
	defer cancel()
	subject := c.subject(from, to, key)
	onEdge, err := c.stream.Info(ctx, jetstream.WithSubjectFilter(c.prefix+escape(from)+"."+escape(to)+".*"))
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Sprintf("no stream %s: the bucket was deleted after this connector opened it", c.streamName) + c.otherBuckets(ctx)
	case err != nil:
		return "nothing: the server did not answer (" + err.Error() + ")"
	}
	parts := []string{c.keySeen(ctx, subject)}
	delete(onEdge.State.Subjects, subject)
	pubs, unread := c.unclaimed(ctx, onEdge.State.Subjects)
	if len(pubs) == 0 {
		parts = append(parts, "no unclaimed publication of another key on the edge")
	} else {
		what := "publications of other keys"
		if len(pubs) == 1 {
			what = "publication of another key"
		}
		parts = append(parts, fmt.Sprintf("%d unclaimed %s on the edge (%s)", len(pubs), what, listed(pubs, func(s string) string {
			_, _, k, _ := DecodeKey(strings.TrimPrefix(s, c.prefix))
			return k
		})))
	}
	if unread > 0 {
		parts = append(parts, fmt.Sprintf("%d more entries on the edge not read", unread))
	}
	// The key on another edge: a stage id given wrong at one end.
	if elsewhere, err := c.stream.Info(ctx, jetstream.WithSubjectFilter(c.prefix+"*.*."+escape(key))); err == nil {
		delete(elsewhere.State.Subjects, subject)
		if pubs, _ := c.unclaimed(ctx, elsewhere.State.Subjects); len(pubs) > 0 {
			parts = append(parts, "the key unclaimed on edge "+listed(pubs, func(s string) string {
				f, t, _, _ := DecodeKey(strings.TrimPrefix(s, c.prefix))
				return f + "->" + t
			})+": both ends must name the same stages")
		}
	}
	return strings.Join(parts, ", ") + c.otherBuckets(ctx)
}

// keySeen says what the key's entry holds.
func (c *Connector) keySeen(ctx context.Context, subject string) string {
	e, found, err := c.last(ctx, subject)
	switch {
	case err != nil:
		return "the key's entry unread (" + err.Error() + ")"
	case !found:
		return "no entry for the key"
	case e.publication():
		return fmt.Sprintf("the key's publication (revision %d) unclaimed: it came at the deadline, or another receiver is claiming it", e.seq)
	case e.header.Get(hdrRetiredBy) != "":
		return "the key's last publication retired by its producer's " + e.header.Get(hdrRetiredBy)
	case e.header.Get(hdrClaimed) != "":
		return "the key's last publication (revision " + e.header.Get(hdrClaimedRevision) + ") claimed already (by another receiver, or an earlier receive)"
	case e.header.Get(jetstream.MarkerReasonHeader) == "MaxAge":
		return "the key's last publication expired unclaimed (Options.MaxAge)"
	}
	return "the key's last publication removed from the bucket"
}

// unclaimed returns which of subjects (of a stream info, in order) hold an
// unclaimed publication, reading at most maxClassified of them, and how
// many it left unread.
func (c *Connector) unclaimed(ctx context.Context, subjects map[string]uint64) (pubs []string, unread int) {
	names := slices.Sorted(maps.Keys(subjects))
	if len(names) > maxClassified {
		names, unread = names[:maxClassified], len(names)-maxClassified
	}
	for _, s := range names {
		if e, found, err := c.last(ctx, s); err == nil && found && e.publication() {
			pubs = append(pubs, s)
		}
	}
	return pubs, unread
}

// otherBuckets names the server's other key-value buckets, if any: a
// producer on one of them never reaches this receiver.
func (c *Connector) otherBuckets(ctx context.Context) string {
	var others []string
	names := c.js.KeyValueStoreNames(ctx)
	for name := range names.Name() {
		if name != c.opts.Bucket {
			others = append(others, name)
		}
	}
	if len(others) == 0 || names.Error() != nil {
		return ""
	}
	slices.Sort(others)
	return ", other buckets on the server (" + listed(others, nil) + "): both ends must use the same Options.Bucket"
}

// listed joins the first maxListed of items, each through name if given,
// and says how many more there are.
func listed(items []string, name func(string) string) string {
	var out []string
	for _, it := range items[:min(len(items), maxListed)] {
		if name != nil {
			it = name(it)
		}
		out = append(out, it)
	}
	if n := len(items) - maxListed; n > 0 {
		out = append(out, fmt.Sprintf("%d more", n))
	}
	return strings.Join(out, ", ")
}
