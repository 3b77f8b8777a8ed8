//go:build linux

package shmtest

import "context"

// For children a test kills at random (crash soaks): reading and writing
// them must not fail the test when they are gone.

// ReadLine returns the child's next stdout line, or io.EOF once it has
// exited and every line it wrote was read, or ctx's error. Unlike Line it
// never fails the test.
func (p *Proc) ReadLine(ctx context.Context) (string, error) { return p.child.Line(ctx) }

// TrySend is Send that returns the error (the child is gone) instead of
// failing the test.
func (p *Proc) TrySend(line string) error { return p.child.Send(line) }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.child.Pid() }
