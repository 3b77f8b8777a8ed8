//go:build linux

package bench

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestPlot(t *testing.T) {
	r := Report{Mode: "latency", Results: []Result{
		{Transport: "ring", Size: 512, P50Us: 4}, {Transport: "ring", Size: 65536, P50Us: 30},
		{Transport: "uds", Size: 512, P50Us: 12}, {Transport: "uds", Size: 65536, P50Us: 60},
	}}
	dir := t.TempDir()
	for name, magic := range map[string][]byte{"l.svg": []byte("<svg"), "l.png": []byte("\x89PNG")} {
		path := filepath.Join(dir, name)
		if err := Plot(path, r); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b[:min(len(b), 200)], magic) {
			t.Errorf("%s does not start like one: %q", name, b[:min(len(b), 40)])
		}
		if name == "l.svg" && (!bytes.Contains(b, []byte("ring")) || !bytes.Contains(b, []byte("uds"))) {
			t.Errorf("svg legend lacks the transports")
		}
	}
	if err := Plot(filepath.Join(dir, "l.pdf"), r); !errors.Is(err, ErrPlotFormat) {
		t.Errorf("pdf: %v", err)
	}
	// One payload and one latency (bench --payload with one transport):
	// both axes have a single value, the y one below 1 µs.
	one := Report{Mode: "pair", Results: []Result{{Transport: "ring", Size: 1, P50Us: 0.5}}}
	for _, name := range []string{"one.svg", "one.png"} {
		if err := Plot(filepath.Join(dir, name), one); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: not written: %v", name, err)
		}
	}
	if err := Plot(filepath.Join(dir, "e.svg"), Report{}); err == nil {
		t.Error("empty report plotted")
	}
}
