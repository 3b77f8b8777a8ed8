//go:build linux

package segment

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"omnishm/internal/shmtest"
)

// The transfer benchmark's child answers messages on a Unix socket: kind
// byte, u32 length, body. Kind 'k': the body is a key to Claim; kind 'u':
// the body is the payload itself, read into a new buffer it owns, as Claim
// returns one. Either way it answers one byte, 1 for success.
func serveTransfers(conn net.Conn) error {
	r := bufio.NewReader(conn)
	var head [5]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		body := make([]byte, binary.LittleEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		ack := []byte{1}
		if head[0] == 'k' {
			if _, ok, err := Claim("", string(body)); !ok || err != nil {
				ack[0] = 0
			}
		}
		if _, err := conn.Write(ack); err != nil {
			return err
		}
	}
}

// roleTransfers serves the transfer benchmark (args: socket path).
func roleTransfers(args []string) int {
	conn, err := net.Dial("unix", args[0])
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	defer conn.Close()
	if err := serveTransfers(conn); err != nil {
		return shmtest.ChildFailed(err)
	}
	return 0
}

// BenchmarkTransfer measures one cross-process publication of a payload:
// per-key Put here plus Claim in the child, against sending the same bytes
// over a Unix-domain socket to the same child. Both take one socket round
// trip for the hand-over, and iterations alternate, so the two figures come
// from the same run and the same machine load.
func BenchmarkTransfer(b *testing.B) {
	for _, size := range []int{512, 1 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			sock := filepath.Join(b.TempDir(), "s")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			child := shmtest.Start(b, "transfers", sock)
			conn, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				conn.Close()
				if err := child.Wait(b, wait); err != nil {
					b.Error(err)
				}
			}()
			p := newProducer(b)
			data := shmtest.Payload(size, 1)
			base := shmtest.Key("bench") + "_"
			frame := make([]byte, 5+size)
			var ack [1]byte
			send := func(kind byte, body []byte) {
				frame = append(frame[:0], kind, 0, 0, 0, 0)
				binary.LittleEndian.PutUint32(frame[1:], uint32(len(body)))
				frame = append(frame, body...)
				if _, err := conn.Write(frame); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(conn, ack[:]); err != nil || ack[0] != 1 {
					b.Fatalf("child: ack %d, %v", ack[0], err)
				}
			}
			var shmTime, unixTime time.Duration
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				key := base + strconv.Itoa(i)
				if _, err := p.Put(key, data); err != nil {
					b.Fatal(err)
				}
				send('k', []byte(key))
				mid := time.Now()
				send('u', data)
				shmTime += mid.Sub(start)
				unixTime += time.Since(mid)
			}
			n := float64(b.N)
			b.ReportMetric(float64(shmTime.Nanoseconds())/n, "shm-ns/op")
			b.ReportMetric(float64(unixTime.Nanoseconds())/n, "unix-ns/op")
			b.ReportMetric(float64(shmTime)/float64(unixTime), "shm/unix")
		})
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n) + "B"
}

// BenchmarkClaimMiss is the cost of polling a key that is not there.
func BenchmarkClaimMiss(b *testing.B) {
	key := shmtest.Key("absent")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := Claim("", key); ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
