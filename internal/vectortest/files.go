package vectortest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// dir finds testdata/vectors from the directory go test runs a package's
// tests in, at any depth of the module: beside the go.mod above it.
var dir = sync.OnceValues(func() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "testdata", "vectors"), nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("vectortest: no go.mod above the test's directory")
		}
		d = parent
	}
})

// Path returns the path of the vector file name (an argument for a child
// process, say); Read returns its content.
func Path(t testing.TB, name string) string {
	t.Helper()
	d, err := dir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, name)
}

// Read returns the content of the vector file name.
func Read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Case is one entry of index.json (README.md there says what each holds).
type Case struct {
	Name                string
	Msgpack             string `json:"msgpack"`
	Frame               string `json:"frame"`
	JSON                string `json:"json"`
	MsgpackRefused      string `json:"msgpack_refused"`
	FrameIsPlainMsgpack bool   `json:"frame_is_plain_msgpack"`
}

// LoadIndex returns the payload cases of index.json sorted by name (entries
// named with a leading underscore, the ring file, are not payloads).
func LoadIndex(t testing.TB) []Case {
	t.Helper()
	var idx map[string]json.RawMessage
	if err := json.Unmarshal(Read(t, "index.json"), &idx); err != nil {
		t.Fatal(err)
	}
	var cases []Case
	for name, body := range idx {
		if strings.HasPrefix(name, "_") {
			continue
		}
		c := Case{Name: name}
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, c)
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].Name < cases[j].Name })
	if len(cases) < 30 { // README.md lists 30: a short index must not pass vacuously
		t.Fatalf("index.json lists only %d payload cases", len(cases))
	}
	return cases
}

// Form is one of the files a case may have.
type Form int

// The forms of a case.
const (
	Msgpack Form = iota + 1 // C.msgpack: serialized bytes, SPEC §5 (payload kind 0)
	Frame                   // C.frame: the tensor frame, SPEC §4 (payload kind 1)
	JSON                    // C.json: the JSON form, SPEC §10 (every case has one)
)

var formNames = [...]string{Msgpack: "msgpack", Frame: "frame", JSON: "json"}

// String is the form's file extension without the dot.
func (f Form) String() string {
	if f < Msgpack || f > JSON {
		return fmt.Sprintf("Form(%d)", int(f))
	}
	return formNames[f]
}

// File returns the name of the case's file in form f, "" if it has none.
func (c Case) File(f Form) string {
	switch f {
	case Msgpack:
		return c.Msgpack
	case Frame:
		return c.Frame
	case JSON:
		return c.JSON
	}
	return ""
}

// Each runs fn, as a subtest named for the case, for every case that has a
// file of form f, with that file's content.
func Each(t *testing.T, f Form, fn func(t *testing.T, c Case, b []byte)) {
	t.Helper()
	for _, c := range LoadIndex(t) {
		if name := c.File(f); name != "" {
			t.Run(c.Name, func(t *testing.T) { fn(t, c, Read(t, name)) })
		}
	}
}

// Seed adds the content of every case's file of form f to the fuzz
// target's corpus.
func Seed(f *testing.F, form Form) {
	f.Helper()
	for _, c := range LoadIndex(f) {
		if name := c.File(form); name != "" {
			f.Add(Read(f, name))
		}
	}
}

// WantText returns the case's JSON text as the Python reference printed
// it, without the final newline: what jsonform.Marshal must print for the
// case's decoded payload.
func WantText(t testing.TB, c Case) []byte {
	t.Helper()
	return bytes.TrimSuffix(Read(t, c.JSON), []byte("\n"))
}

// Want returns the value the case's payload must decode to (FromJSON of
// its JSON form), for SameValue.
func Want(t testing.TB, c Case) any {
	t.Helper()
	return FromJSON(t, Read(t, c.JSON))
}
