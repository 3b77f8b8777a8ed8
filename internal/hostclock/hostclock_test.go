//go:build linux

package hostclock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestNowAdvances(t *testing.T) {
	a := Now()
	if a <= 0 {
		t.Fatalf("Now() = %v", a)
	}
	for Now() == a {
	}
}

// TestNowIsClockMonotonic: a stamp lies between two CLOCK_MONOTONIC
// readings taken around it, give or take the calibration's bracket.
func TestNowIsClockMonotonic(t *testing.T) {
	for range 100 {
		var a, b unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		now := Now()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		const slack = 50 * time.Microsecond
		if now < time.Duration(a.Nano())-slack || now > time.Duration(b.Nano())+slack {
			t.Fatalf("Now() = %v, not within [%v, %v] ± %v", now, a.Nano(), b.Nano(), slack)
		}
	}
}

func BenchmarkNow(b *testing.B) {
	for b.Loop() {
		Now()
	}
}

// BenchmarkClockGettime is what Now cost before: a system call per stamp.
func BenchmarkClockGettime(b *testing.B) {
	var ts unix.Timespec
	for b.Loop() {
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	}
}
