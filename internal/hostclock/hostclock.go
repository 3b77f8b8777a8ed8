// Package hostclock reads the one clock every process of this host shares,
// so a time stamped in one process (a put in the bench, a chunk sent by the
// demo's first stage) can be subtracted from a time stamped in another (its
// arrival in the receiving process).
package hostclock
