package descriptor

import (
	"errors"
	"testing"
)

func TestShapes(t *testing.T) {
	cases := []struct {
		name, json string
		ok         bool
	}{
		{"shm", `{"shm": {"name": "k", "size": 3}, "size": 3}`, true},
		{"host_ring", `{"host_ring": {"name": "r", "position": 0, "size": 3}, "size": 3}`, true},
		{"nats", `{"nats": {"bucket": "omnishm", "key": "0.1.k", "revision": 7, "size": 3}, "size": 3}`, true},
		{"nats in an object", `{"nats": {"bucket": "b", "key": "0.1.k", "revision": 1, "size": 9, "object": "x"}, "size": 9}`, true},
		{"nats map form", `{"k": {"nats": {"bucket": "b", "key": "0.1.k", "revision": 1, "size": 0}, "size": 0}}`, true},
		{"two handles", `{"shm": {"name": "k", "size": 3}, "nats": {"bucket": "b", "key": "k", "revision": 1, "size": 3}, "size": 3}`, false},
		{"no handle", `{"size": 3}`, false},
		{"nats without revision", `{"nats": {"bucket": "b", "key": "0.1.k", "size": 3}, "size": 3}`, false},
		{"nats without bucket", `{"nats": {"key": "0.1.k", "revision": 2, "size": 3}, "size": 3}`, false},
		{"nats negative size", `{"nats": {"bucket": "b", "key": "0.1.k", "revision": 2, "size": -1}, "size": 3}`, false},
	}
	for _, c := range cases {
		d, err := Parse([]byte(c.json), "k")
		if c.ok != (err == nil) {
			t.Errorf("%s: %+v %v", c.name, d, err)
			continue
		}
		if !c.ok && !errors.Is(err, ErrBad) {
			t.Errorf("%s: %v does not wrap ErrBad", c.name, err)
		}
		if c.ok {
			back, err := Parse([]byte(d.String()), "k")
			if err != nil || back.String() != d.String() {
				t.Errorf("%s: %s does not round-trip: %v", c.name, d, err)
			}
		}
	}
	// A key named like a handle is not taken for the map form.
	d, err := Parse([]byte(`{"nats": {"bucket": "b", "key": "k", "revision": 3, "size": 1}, "size": 1}`), "nats")
	if err != nil || d.Nats == nil || d.Nats.Revision != 3 {
		t.Fatalf("key \"nats\": %+v %v", d, err)
	}
}
