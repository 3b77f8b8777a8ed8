//go:build linux

package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// ErrPlotFormat is returned by Plot for a file name that is neither .svg
// nor .png.
var ErrPlotFormat = errors.New("bench: plot file must end in .svg or .png")

// CheckPlotPath reports ErrPlotFormat early, before a long run.
func CheckPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("%w: %q", ErrPlotFormat, path)
}

// Plot draws p50 latency (in stream mode the rate, MB/s) against payload
// size, one line per transport and one for the memcpy floor, on log-log
// axes, and writes it to path (.svg or .png).
func Plot(path string, r Report) error {
	if err := CheckPlotPath(path); err != nil {
		return err
	}
	what, unit, y := "p50 latency", "µs", func(x Result) float64 { return x.P50Us }
	if r.Mode == string(Stream) {
		what, unit, y = "rate", "MB/s", func(x Result) float64 { return x.BytesPerS / 1e6 }
	}
	p := plot.New()
	p.Title.Text = "omnishm " + r.Mode + ": " + what + " by payload size"
	p.X.Label.Text = "payload size (bytes)"
	p.Y.Label.Text = what + " (" + unit + ")"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	var names []string
	series := map[string]plotter.XYs{}
	for _, x := range r.Results {
		if y(x) <= 0 || x.Size <= 0 {
			continue // a log axis has no place for zero
		}
		if _, ok := series[x.Transport]; !ok {
			names = append(names, x.Transport)
		}
		series[x.Transport] = append(series[x.Transport], plotter.XY{X: float64(x.Size), Y: y(x)})
	}
	if len(names) == 0 {
		return errors.New("bench: nothing to plot")
	}
	var args []any
	for _, n := range names {
		xy := series[n]
		slices.SortFunc(xy, func(a, b plotter.XY) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
		args = append(args, n, xy)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	// One size (a --payload run) or one latency leaves an axis with no
	// width, which the plot widens by ±1: to zero or below on a log axis,
	// where it panics. Widen it by a factor instead.
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		if a.Min == a.Max {
			a.Min, a.Max = a.Min/2, a.Max*2
		}
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	return nil
}
