package scope

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
)

func TestNamesFollowSpec(t *testing.T) {
	n := ForUID(1000, "my-deployment", 42)
	sum := sha256.Sum256([]byte("my-deployment"))
	wantWake := "/dev/shm/omni_shm_wake_1000_" + hex.EncodeToString(sum[:])[:24]
	if n.WakeDir != wantWake {
		t.Fatalf("wake dir %q, want %q", n.WakeDir, wantWake)
	}
	sum = sha256.Sum256([]byte(wantWake))
	wantRing := "omni_shm_ring_v1_1000_" + hex.EncodeToString(sum[:])[:24]
	if n.RingDirName != wantRing || n.RingDir() != "/dev/shm/"+wantRing {
		t.Fatalf("ring dir %q, want %q", n.RingDirName, wantRing)
	}
	if got := n.EdgePrefix("0", "1"); got != wantRing+"_0_1_" {
		t.Fatalf("edge prefix %q", got)
	}
	unscoped := ForUID(1000, "", 42)
	if unscoped.WakeDir != "/dev/shm/omni_shm_wake_1000_42" {
		t.Fatalf("unscoped wake dir %q", unscoped.WakeDir)
	}
}

func TestValidRingName(t *testing.T) {
	good := fmt.Sprintf("omni_shm_ring_v1_7_%s_0_1_99_%s", Hash("x"), "0123456789abcdef0123456789abcdef")
	cases := []struct {
		name string
		ok   bool
	}{
		{good, true},
		{"omni_shm_ring_v1_8_abc", false},
		{"omni_shm_ring_v1_7_../x", false},
		{"omni_shm_ring_v1_7_a/b", false},
		{"omni_shm_ring_v1_7_a.b", false},
		{"", false},
	}
	for _, c := range cases {
		if got := ValidRingName(7, c.name); got != c.ok {
			t.Errorf("ValidRingName(%q) = %v, want %v", c.name, got, c.ok)
		}
	}
}

func TestIsNumeric(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "12": true, "": false, "-1": false, "1a": false, "stage": false} {
		if IsNumeric(s) != want {
			t.Errorf("IsNumeric(%q) != %v", s, want)
		}
	}
}
