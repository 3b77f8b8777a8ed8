package proc

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseStartTime(t *testing.T) {
	cases := []struct {
		name, stat string
		want       uint64 // 0: an error
	}{
		{"plain", "12 (sleep) S 1 12 12 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 98765 0 0", 98765},
		{"name with spaces and parens", "12 (a) b) (c) S 1 12 12 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 4242 0", 4242},
		{"no paren", "12 sleep S 1", 0},
		{"short", "12 (x) S 1 2 3", 0},
		{"not a number", "12 (x) S 1 12 12 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 zz 0", 0},
	}
	for _, c := range cases {
		got, err := ParseStartTime([]byte(c.stat))
		if (err == nil) != (c.want != 0) || got != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

func TestJudge(t *testing.T) {
	cases := []struct {
		name      string
		now       uint64
		err       error
		gone      bool
		want      Liveness
		wantAsked bool
	}{
		{"same start", 42, nil, false, Alive, false},
		{"pid reused", 43, nil, false, Dead, false},
		{"no process", 0, ErrNoProcess, false, Dead, false},
		{"no proc entry, kill says gone", 0, unix.ENOENT, true, Dead, true},
		{"proc unreadable, process there", 0, unix.EMFILE, false, Unknown, true},
	}
	for _, c := range cases {
		asked := false
		got := judge(42, c.now, c.err, func() bool { asked = true; return c.gone })
		if got != c.want || asked != c.wantAsked {
			t.Errorf("%s: %s (asked %v), want %s (asked %v)", c.name, got, asked, c.want, c.wantAsked)
		}
	}
	if Unknown.String() != "unknown" || Liveness(0) != Unknown {
		t.Error("the zero Liveness must be Unknown")
	}
}

// FuzzParseStartTime feeds ParseStartTime arbitrary stat lines (a process
// names itself, so the command field may hold anything): no panic, and an
// accepted line's start time is its 20th field after the last ')'.
func FuzzParseStartTime(f *testing.F) {
	f.Add([]byte("12 (sleep) S 1 12 12 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 98765 0 0"))
	f.Add([]byte("12 (a) b) (c) S 1 12 12 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 4242 0"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, stat []byte) {
		v, err := ParseStartTime(stat)
		if err != nil {
			return
		}
		fields := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
		if len(fields) < 20 || strings.TrimLeft(string(fields[19]), "0") != strings.TrimLeft(strconv.FormatUint(v, 10), "0") {
			t.Fatalf("ParseStartTime(%q) = %d", stat, v)
		}
	})
}
