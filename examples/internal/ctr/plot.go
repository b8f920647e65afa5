package ctr

import (
	"fmt"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePlot draws two panels into a PNG file at path: training and test
// loss per epoch on top, training and test accuracy per epoch below. test
// names the evaluation data in the legend ("test", "held-out folds").
func WritePlot(path, title string, results []EpochResult, test string) error {
	if len(results) == 0 {
		return fmt.Errorf("no epochs to plot")
	}
	var trainLoss, testLoss, trainAcc, testAcc plotter.XYs
	for _, r := range results {
		x := float64(r.Epoch + 1)
		trainLoss = append(trainLoss, plotter.XY{X: x, Y: r.Loss})
		trainAcc = append(trainAcc, plotter.XY{X: x, Y: r.TrainAcc})
		if r.TestN > 0 {
			testLoss = append(testLoss, plotter.XY{X: x, Y: r.TestLoss})
			testAcc = append(testAcc, plotter.XY{X: x, Y: r.TestAcc})
		}
	}
	top := plot.New()
	top.Title.Text = title
	top.Y.Label.Text = "mean log-loss"
	bottom := plot.New()
	bottom.X.Label.Text = "epoch"
	bottom.Y.Label.Text = "accuracy"
	lines := []any{"training (during epoch)", trainLoss}
	if len(testLoss) > 0 {
		lines = append(lines, test+" (after epoch)", testLoss)
	}
	if err := plotutil.AddLinePoints(top, lines...); err != nil {
		return err
	}
	lines = []any{"training (during epoch)", trainAcc}
	if len(testAcc) > 0 {
		lines = append(lines, test+" (after epoch)", testAcc)
	}
	if err := plotutil.AddLinePoints(bottom, lines...); err != nil {
		return err
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Min = 0.5
		p.X.Max = float64(len(results)) + 0.5
		p.X.Tick.Marker = epochTicks{n: len(results)}
		p.Add(plotter.NewGrid())
		p.Legend.Top = p == top
		p.Legend.Left = false
	}
	// Accuracy panel: never hide a change in the third decimal behind a
	// 0..1 axis, but keep some context.
	lo, hi := 1.0, 0.0
	for _, xy := range append(append(plotter.XYs{}, trainAcc...), testAcc...) {
		lo, hi = min(lo, xy.Y), max(hi, xy.Y)
	}
	bottom.Y.Min = max(0, lo-0.02)
	bottom.Y.Max = min(1, hi+0.02)

	img := vgimg.NewWith(vgimg.UseWH(8*vg.Inch, 7*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	return writeFileAtomic(path, func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
		return err
	})
}

// epochTicks labels whole epochs, at most about a dozen of them.
type epochTicks struct{ n int }

// Ticks implements plot.Ticker.
func (t epochTicks) Ticks(lo, hi float64) []plot.Tick {
	step := max(1, (t.n+11)/12)
	var ticks []plot.Tick
	for e := 1; e <= t.n; e++ {
		tk := plot.Tick{Value: float64(e)}
		if (e-1)%step == 0 || e == t.n {
			tk.Label = fmt.Sprint(e)
		}
		ticks = append(ticks, tk)
	}
	return ticks
}
