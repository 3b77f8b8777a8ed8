//go:build linux

package hostclock

import "testing"

func TestNowAdvances(t *testing.T) {
	a := Now()
	if a <= 0 {
		t.Fatalf("Now() = %v", a)
	}
	for Now() == a {
	}
}
