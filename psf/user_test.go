package psf_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

// clip are the parameters of the test's kernels, sent with gob.
type clip struct{ Lo, Hi float64 }

func (c clip) apply(x float64) float64 { return math.Min(math.Max(x, c.Lo), c.Hi) }

var (
	kClip      = psf.MustRegister(psf.NewMap("psftest.Clip", psf.Gob[clip](), func(c clip, x float64) float64 { return c.apply(x) }))
	kAddIndex  = psf.MustRegister(psf.NewMapWithIndex("psftest.AddIndex", psf.Float64, func(s float64, col int64, x float64) float64 { return x + s*float64(col) }))
	kHypot     = psf.MustRegister(psf.NewZip2Map("psftest.Hypot", psf.None, func(_ struct{}, x, y float64) float64 { return math.Hypot(x, y) }))
	kLerpIndex = psf.MustRegister(psf.NewZip2MapWithIndex("psftest.LerpIndex", psf.Int64, func(n int64, col int64, x, y float64) float64 {
		t := float64(col%n) / float64(n)
		return x*(1-t) + y*t
	}))
	kFma      = psf.MustRegister(psf.NewZip3Map("psftest.Fma", psf.None, func(_ struct{}, x, y, z float64) float64 { return math.FMA(x, y, z) }))
	kPickEven = psf.MustRegister(psf.NewZip3MapWithIndex("psftest.PickEven", psf.Gob[clip](), func(c clip, col int64, x, y, z float64) float64 {
		if col%2 == 0 {
			return c.apply(x)
		}
		return y - z
	}))
)

func TestUserKernels(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true})
	ctx := ctxT(t)
	cl := j.clients[0]
	for li, meta := range libLayouts() {
		t.Run(fmt.Sprintf("layout%d", li), func(t *testing.T) {
			meta.Name = fmt.Sprintf("user%d", li)
			model := libData(uint64(20 + li))
			m := setup(t, ctx, cl, meta, model)
			c := clip{Lo: -3, Hi: 2}
			steps := []struct {
				f     psf.UpdateFunc
				to    int
				local func(col int) float64
			}{
				{psf.Map(kClip, c, 0, 4), 4, func(i int) float64 { return c.apply(model[0][i]) }},
				{psf.Map(kClip, c, 2, 2), 2, func(i int) float64 { return c.apply(model[2][i]) }},
				{psf.Map(kAddIndex, 0.5, 3, 5), 5, func(i int) float64 { return model[3][i] + 0.5*float64(i) }},
				{psf.Zip2Map(kHypot, struct{}{}, 0, 3, 1), 1, func(i int) float64 { return math.Hypot(model[0][i], model[3][i]) }},
				{psf.Zip2Map(kLerpIndex, 4, 0, 2, 4), 4, func(i int) float64 {
					t := float64(i%4) / 4
					return model[0][i]*(1-t) + model[2][i]*t
				}},
				{psf.Zip3Map(kFma, struct{}{}, 0, 2, 3, 5), 5, func(i int) float64 { return math.FMA(model[0][i], model[2][i], model[3][i]) }},
				{psf.Zip3Map(kPickEven, c, 0, 2, 3, 3), 3, func(i int) float64 {
					if i%2 == 0 {
						return c.apply(model[0][i])
					}
					return model[2][i] - model[3][i]
				}},
			}
			for _, s := range steps {
				if err := m.Update(ctx, s.f); err != nil {
					t.Fatalf("%s: %v", s.f.Name(), err)
				}
				next := make([]float64, libCols)
				for i := range next {
					next[i] = s.local(i)
				}
				model[s.to] = next
				got, err := m.GetRow(ctx, s.to)
				if err != nil {
					t.Fatal(err)
				}
				checkRow(t, s.f.Name(), got, model[s.to])
			}
		})
	}
}
