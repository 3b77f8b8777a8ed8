package scope

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	uid := 1000
	d := ForUID(uid, "s", 1).RingDirName
	ringCases := []struct {
		name string
		want RingFile
		ok   bool
	}{
		{d + "_0_1_123_0123456789abcdef0123456789abcdef", RingFile{Dir: d, From: "0", To: "1", PID: 123, ID: "0123456789abcdef0123456789abcdef"}, true},
		{d + "_10_2_9_ab", RingFile{Dir: d, From: "10", To: "2", PID: 9, ID: "ab"}, true},
		{d + "_0_1_123", RingFile{}, false},
		{d + "_0_1_x_ab", RingFile{}, false},
		{d + "_0_1_0_ab", RingFile{}, false},
		{d + "_a_1_2_ab", RingFile{}, false},
		{d + "_0_1_2_zz", RingFile{}, false},
		{d + "_0_1_2_ab_cd", RingFile{}, false},
		{d, RingFile{}, false},
		{"omni_shm_ring_v1_1001_" + d[len(d)-24:] + "_0_1_2_ab", RingFile{}, false},
		{d + "_0_1_2_a-b", RingFile{}, false},
	}
	for _, tc := range ringCases {
		got, ok := ParseRingName(uid, tc.name)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseRingName(%q) = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if !IsRingDirName(uid, d) || IsRingDirName(uid, d+"0") || IsRingDirName(uid+1, d) {
		t.Error("IsRingDirName")
	}
	n := ForUID(uid, "my-deployment", 1)
	if got, ok := RingDirOfWakeDir(uid, n.WakeDir[len(ShmDir)+1:]); !ok || got != n.RingDirName {
		t.Errorf("RingDirOfWakeDir = %q, %v; want %q", got, ok, n.RingDirName)
	}
	noScope := ForUID(uid, "", 4242)
	if got, ok := RingDirOfWakeDir(uid, "omni_shm_wake_1000_4242"); !ok || got != noScope.RingDirName {
		t.Errorf("RingDirOfWakeDir(ppid form) = %q, %v", got, ok)
	}
	if _, ok := RingDirOfWakeDir(uid, "omni_shm_wake_1001_4242"); ok {
		t.Error("wake dir of another uid accepted")
	}
	for name, want := range map[string]string{"shm_k_lockfile.lock": "k", "shm_a_b_lockfile.lock": "a_b", "shm__lockfile.lock": "", "x_k_lockfile.lock": ""} {
		got, ok := LockKey(name)
		if got != want || ok != (want != "") {
			t.Errorf("LockKey(%q) = %q, %v", name, got, ok)
		}
	}
	if LockName("k") != "shm_k_lockfile.lock" {
		t.Error("lockName")
	}
	for name, want := range map[string]string{"3_abcdef": "3", "x_abc": "", "3_": "", "3": "", "3_xyz": ""} {
		got, ok := FIFOStage(name)
		if got != want || ok != (want != "") {
			t.Errorf("FIFOStage(%q) = %q, %v", name, got, ok)
		}
	}
}

func TestBuiltNamesParseBack(t *testing.T) {
	n := ForUID(1000, "x", 1)
	id, err := NewID()
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 32 || !IsHex(id) || id[12] != '4' {
		t.Fatalf("NewID() = %q, not a uuid4 hex", id)
	}
	name := n.RingName("3", "4", 77, id)
	got, ok := ParseRingName(1000, name)
	if !ok || got != (RingFile{Dir: n.RingDirName, From: "3", To: "4", PID: 77, ID: id}) {
		t.Fatalf("ParseRingName(RingName) = %+v, %v", got, ok)
	}
	if n.MarkerPath(name) != n.RingDir()+"/"+name || Path(name) != "/dev/shm/"+name {
		t.Error("MarkerPath / Path")
	}
	if s, ok := FIFOStage(FIFOName("12", id)); !ok || s != "12" {
		t.Errorf("FIFOStage(FIFOName) = %q, %v", s, ok)
	}
	if !IsStageFIFO(FIFOName("1", id), "1") || IsStageFIFO(FIFOName("12", id), "1") || IsStageFIFO(TempFIFOName(id), "1") ||
		IsStageFIFO(SleepersName(FIFOName("1", id)), "1") {
		t.Error("IsStageFIFO")
	}
	if _, ok := FIFOStage(SleepersName(FIFOName("1", id))); ok {
		t.Error("FIFOStage(SleepersName) is a FIFO's")
	}
	if f, ok := SleepersFIFO(SleepersName(FIFOName("1", id))); !ok || f != FIFOName("1", id) {
		t.Errorf("SleepersFIFO(SleepersName) = %q, %v", f, ok)
	}
	for _, bad := range []string{FIFOName("1", id), SleepersName("x_" + id), SleepersName(TempFIFOName(id)), ".sleepers_"} {
		if _, ok := SleepersFIFO(bad); ok {
			t.Errorf("SleepersFIFO(%q) is a sleepers file's", bad)
		}
	}
	if tmp, ok := TempFIFOOf(FIFOName("3", id)); !ok || tmp != TempFIFOName(id) {
		t.Errorf("TempFIFOOf = %q, %v", tmp, ok)
	}
	if _, ok := TempFIFOOf(TempFIFOName(id)); ok {
		t.Error("TempFIFOOf(TempFIFOName)")
	}
	if k, ok := LockKey(LockName("req_1")); !ok || k != "req_1" {
		t.Errorf("LockKey(LockName) = %q, %v", k, ok)
	}
}

func TestMatchesStage(t *testing.T) {
	cases := []struct {
		name, stage string
		want        bool
	}{
		{"1_0123abcd", "1", true},
		{"1_", "1", true}, // Python's glob "1_*" matches it too
		{"12_abc", "1", false},
		{"1_abc", "12", false},
		{"12_abc", "12", true},
		{"1", "1", false},
		{".tmp_abc", "1", false},
		{"x1_abc", "1", false},
	}
	for _, c := range cases {
		if got := IsStageFIFO(c.name, c.stage); got != c.want {
			t.Errorf("IsStageFIFO(%q, %q) = %v, want %v", c.name, c.stage, got, c.want)
		}
	}
}

func TestUUID4Hex(t *testing.T) {
	a, err := NewID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewID()
	if len(a) != 32 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("uuid %q is not 32 lower-case hex digits", a)
	}
	if a[12] != '4' || !strings.ContainsRune("89ab", rune(a[16])) {
		t.Fatalf("uuid %q lacks version 4 / RFC 4122 variant", a)
	}
	if a == b {
		t.Fatal("two uuids are equal")
	}
}

// FuzzParseNames feeds the parsers of /dev/shm entry names arbitrary names,
// as a hostile or corrupt directory holds them: no panic, and a name a
// parser accepts is made of the parts it returns, as its builder makes it.
func FuzzParseNames(f *testing.F) {
	const uid = 1000
	n := ForUID(uid, "x", 1)
	id := "0123456789abcdef0123456789abcdef"
	for _, s := range []string{n.RingName("3", "4", 77, id), FIFOName("12", id), SleepersName(FIFOName("1", id)),
		TempFIFOName(id), LockName("req_1"), n.RingDirName, "omni_shm_wake_1000_ab", n.RingDirName + "_0_1_99999999999999999999_ab", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if rf, ok := ParseRingName(uid, name); ok {
			// The pid's text may have leading zeros, which no producer writes.
			edge := (Names{RingDirName: rf.Dir}).EdgePrefix(rf.From, rf.To)
			if !ValidRingName(uid, name) || !IsRingDirName(uid, rf.Dir) || rf.PID <= 0 ||
				!strings.HasPrefix(name, edge) || !strings.HasSuffix(name, "_"+rf.ID) || len(name) <= len(edge)+len(rf.ID)+1 {
				t.Fatalf("ParseRingName(%q) = %+v, which names another file", name, rf)
			}
		}
		if IsRingDirName(uid, name) && !ValidRingName(uid, name) {
			t.Fatalf("ring directory %q is not a valid ring name", name)
		}
		if d, ok := RingDirOfWakeDir(uid, name); ok && !IsRingDirName(uid, d) {
			t.Fatalf("RingDirOfWakeDir(%q) = %q, not a ring directory", name, d)
		}
		if stage, ok := FIFOStage(name); ok {
			if !IsNumeric(stage) || !IsStageFIFO(name, stage) {
				t.Fatalf("FIFOStage(%q) = %q", name, stage)
			}
			if tmp, ok := TempFIFOOf(name); !ok || !IsTempFIFO(tmp) {
				t.Fatalf("TempFIFOOf(%q) = %q, %v", name, tmp, ok)
			}
		}
		if fifo, ok := SleepersFIFO(name); ok && SleepersName(fifo) != name {
			t.Fatalf("SleepersFIFO(%q) = %q", name, fifo)
		}
		if key, ok := LockKey(name); ok && LockName(key) != name {
			t.Fatalf("LockKey(%q) = %q", name, key)
		}
	})
}
