package psf

import (
	"math"
	"math/rand/v2"
	"testing"
)

// sameFloat reports whether a and b are the same value: equal bits, or
// both NaN.
func sameFloat(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || math.IsNaN(a) && math.IsNaN(b)
}

// The specialised loops of the aggregates give what plain loops give, on
// any length, with zeros of both signs, infinities and NaNs anywhere.
func TestAggregateLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	specials := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 1e308, -1e308, 5e-324}
	for iter := 0; iter < 3000; iter++ {
		x := make([]float64, r.IntN(600))
		for i := range x {
			switch r.IntN(6) {
			case 0:
				x[i] = specials[r.IntN(len(specials))]
			case 1:
				x[i] = 0
			default:
				x[i] = r.NormFloat64()
			}
		}
		if iter%3 == 0 { // mostly without NaN or infinities
			for i, v := range x {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					x[i] = 1
				}
			}
		}
		mx, mn, amx, amn := math.Inf(-1), math.Inf(1), 0.0, math.Inf(1)
		var nnz int64
		var sum, asum, ssq float64
		for _, v := range x {
			mx, mn = max(mx, v), min(mn, v)
			amx, amn = max(amx, math.Abs(v)), min(amn, math.Abs(v))
			if v != 0 {
				nnz++
			}
			sum += v
			asum += math.Abs(v)
			ssq += v * v
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"max", maxOf(x), mx}, {"min", minOf(x), mn}, {"amax", amaxOf(x), amx}, {"amin", aminOf(x), amn},
			{"nnz", float64(nnzOf(x)), float64(nnz)},
		} {
			if !sameFloat(c.got, c.want) {
				t.Fatalf("%s of %v = %v, want %v", c.name, x, c.got, c.want)
			}
		}
		huge := false // sums may overflow, to +Inf or -Inf or NaN depending on the order
		for _, v := range x {
			huge = huge || math.Abs(v) == 1e308
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"sum", sumOf(x), sum}, {"asum", asumOf(x), asum}, {"ssq", ssqOf(x), ssq}, {"dot", dotOf(x, x), ssq}} {
			finite := !math.IsInf(c.want, 0) && !math.IsNaN(c.want)
			if huge && (!finite || math.IsInf(c.got, 0) || math.IsNaN(c.got)) {
				continue
			}
			if finite && math.Abs(c.got-c.want) > 1e-9*math.Max(1, asum*asum) || !finite && !sameFloat(c.got, c.want) && !(math.IsInf(c.got, 0) && math.IsInf(c.want, 0) && c.got == c.want) {
				t.Fatalf("%s of %v = %v, want %v", c.name, x, c.got, c.want)
			}
		}
	}
}

// The compensated sum drops its correction once the sum is not finite.
func TestAccInfinities(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{1, inf, 2}, inf},
		{[]float64{inf, 1}, inf},
		{[]float64{1e308, 1e308, -1}, inf},
		{[]float64{-1e308, -1e308}, -inf},
		{[]float64{inf, -inf}, math.NaN()},
		{[]float64{1, math.NaN(), inf}, math.NaN()},
		{[]float64{1e16, 1, -1e16}, 1},
	} {
		var a acc
		for _, v := range c.in {
			a.add(v)
		}
		if got := a.sum(); !sameFloat(got, c.want) {
			t.Errorf("%v: %v, want %v", c.in, got, c.want)
		}
	}
}
