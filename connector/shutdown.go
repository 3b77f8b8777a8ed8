//go:build linux

package connector

import (
	"context"
	"errors"
)

// Shutdown closes the connector gracefully, in the spirit of
// http.Server.Shutdown: it refuses new puts (they fail with ErrClosed),
// lets the puts already under way finish, waits until every publication of
// this connector still unclaimed has been claimed by a receiver (or
// retired, by a Cleanup meanwhile), and then closes the connector as Close
// does. If ctx ends first it closes at once, retiring what is left, and
// returns ctx.Err() (joined with Close's error, if any); otherwise it
// returns Close's error.
//
// A Put that began before Shutdown completes, and Shutdown waits for its
// publication too; one that begins after fails with ErrClosed. Get, Recv,
// Cleanup and Claimed keep working until the close. If Close was called
// before or is called meanwhile, Shutdown returns ErrClosed. The wait is
// WaitClaimed's, one publication after another: no busy loop.
func (c *SHM) Shutdown(ctx context.Context) error {
	if closed := c.claims.drain(); closed {
		return ErrClosed
	}
	err := c.awaitClaims(ctx)
	if cerr := c.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	return err
}

// awaitClaims waits for the puts under way, then for each publication the
// ledger holds.
func (c *SHM) awaitClaims(ctx context.Context) error {
	var records []record
	for {
		changed := c.claims.changes()
		var n int
		if n, records = c.unsettled(); n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
	for _, r := range records {
		err := c.WaitClaimed(ctx, r.descriptor())
		switch {
		case err == nil, errors.Is(err, ErrRetired):
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return err
		}
	}
	if c.claims.isClosed() {
		return ErrClosed // Close came first: it retired what was left
	}
	return nil
}
