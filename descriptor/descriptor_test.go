package descriptor

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name, json, key string
		want            string // the String of the result, "" for an error
	}{
		{"shm", `{"shm": {"name": "k", "size": 3}, "size": 3}`, "k", `{"shm":{"name":"k","size":3},"size":3}`},
		{"ring", `{"host_ring": {"name": "r", "position": 64, "size": 5}, "size": 5}`, "k", `{"host_ring":{"name":"r","position":64,"size":5},"size":5}`},
		{"keyed form", `{"k": {"shm": {"name": "k", "size": 1}, "size": 1}}`, "k", `{"shm":{"name":"k","size":1},"size":1}`},
		{"key named like a field", `{"shm": {"name": "shm", "size": 1}, "size": 1}`, "shm", `{"shm":{"name":"shm","size":1},"size":1}`},
		{"both handles", `{"shm": {"name": "k", "size": 1}, "host_ring": {"name": "r", "position": 0, "size": 1}, "size": 1}`, "k", ""},
		{"no handle", `{"size": 1}`, "k", ""},
		{"negative size", `{"shm": {"name": "k", "size": 1}, "size": -1}`, "k", ""},
		{"no name", `{"shm": {"name": "", "size": 1}, "size": 1}`, "k", ""},
		{"not json", `{`, "k", ""},
	}
	for _, c := range cases {
		d, err := Parse([]byte(c.json), c.key)
		switch {
		case c.want == "" && !errors.Is(err, ErrBad):
			t.Errorf("%s: Parse = %v, %v; want ErrBad", c.name, d, err)
		case c.want != "" && (err != nil || d.String() != c.want):
			t.Errorf("%s: Parse = %v, %v; want %s", c.name, d, err, c.want)
		}
	}
	d, err := From(map[string]any{"k": map[string]any{"host_ring": map[string]any{"name": "r", "position": 16, "size": 2}, "size": 2}}, "k")
	if err != nil || d.HostRing == nil || d.HostRing.Position != 16 {
		t.Errorf("From(decoded map) = %v, %v", d, err)
	}
}

// FuzzParse feeds Parse the JSON a peer or a caller passes back: no panic,
// every refusal wraps ErrBad, and what it accepts is valid and reads back
// from its own String unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"shm": {"name": "k", "size": 3}, "size": 3}`,
		`{"host_ring": {"name": "r", "position": 64, "size": 5}, "size": 5}`,
		`{"k": {"shm": {"name": "k", "size": 1}, "size": 1}}`,
		`{"nats": {"bucket": "b", "key": "k", "revision": 2, "size": 1, "object": "o"}, "size": 1}`,
		`{"shm": null, "size": 1e400}`} {
		f.Add([]byte(s), "k")
	}
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		d, err := Parse(data, key)
		if err != nil {
			if !errors.Is(err, ErrBad) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrBad", data, err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("Parse(%q) accepted an invalid descriptor: %v", data, err)
		}
		again, err := Parse([]byte(d.String()), key)
		if err != nil || again.String() != d.String() {
			t.Fatalf("Parse(%q).String() = %s reads back as %v, %v", data, d, again, err)
		}
	})
}
