package vectortest

import (
	"os"
	"testing"
)

// The index is found from this package's directory, two levels below the
// module, and every file it names exists.
func TestIndexFiles(t *testing.T) {
	seen := map[Form]int{}
	for _, c := range LoadIndex(t) {
		for _, f := range []Form{Msgpack, Frame, JSON} {
			name := c.File(f)
			if name == "" {
				continue
			}
			seen[f]++
			if _, err := os.Stat(Path(t, name)); err != nil {
				t.Errorf("%s: %v", c.Name, err)
			}
		}
		if c.JSON == "" {
			t.Errorf("%s has no JSON form", c.Name)
		}
	}
	for _, f := range []Form{Msgpack, Frame, JSON} {
		if seen[f] < 20 {
			t.Errorf("only %d %s files", seen[f], f)
		}
	}
	if Form(0).String() != "Form(0)" || Frame.String() != "frame" || (Case{}).File(Form(9)) != "" {
		t.Error("Form names")
	}
}
