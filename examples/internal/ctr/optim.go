package ctr

import (
	"fmt"
	"math"
)

// Param is the state a server keeps for one key: the weight and, for FTRL,
// the accumulators z and n.
type Param struct {
	W, Z, N float64
}

// Optimizer turns a key's gradient into a new weight on the server.
type Optimizer interface {
	// Update applies gradient g to p. share is the part of one step's
	// regularisation this update carries: 1 when the update is a whole step
	// (BSP), 1/workers when each worker's push is applied on its own (ASP,
	// SSP). rate scales the learning rate (the -lr-decay schedule).
	Update(p *Param, g, share, rate float64)
	// Start returns the state of a key whose weight starts at w0 (not 0:
	// a factor model's factors).
	Start(w0 float64) Param
	// String describes the optimiser and its settings.
	String() string
}

// SGD is plain stochastic gradient descent with L2 regularisation:
// w ← w - rate·LR·(g + share·L2·w). The regularisation is lazy: only keys
// that a step touches decay.
type SGD struct {
	LR, L2 float64
}

// Update implements Optimizer.
func (o SGD) Update(p *Param, g, share, rate float64) {
	p.W -= rate * o.LR * (g + share*o.L2*p.W)
}

// Start implements Optimizer.
func (o SGD) Start(w0 float64) Param { return Param{W: w0} }

// String implements Optimizer.
func (o SGD) String() string { return fmt.Sprintf("sgd(lr=%g, l2=%g)", o.LR, o.L2) }

// FTRL is FTRL-proximal (McMahan et al., "Ad Click Prediction: a View from
// the Trenches", 2013) with per-coordinate learning rates:
//
//	σ = (√(n+g²) - √n) / α
//	z ← z + g - σ·w
//	n ← n + g²
//	w = 0                                        if |z| ≤ L1
//	w = -(z - sign(z)·L1) / ((β + √n)/α + L2)    otherwise
type FTRL struct {
	Alpha, Beta, L1, L2 float64
}

// Update implements Optimizer. FTRL's regularisation is part of its closed
// form and its per-coordinate rates decay by themselves, so share and rate
// are not used.
func (o FTRL) Update(p *Param, g, _, _ float64) {
	sigma := (math.Sqrt(p.N+g*g) - math.Sqrt(p.N)) / o.Alpha
	p.Z += g - sigma*p.W
	p.N += g * g
	if math.Abs(p.Z) <= o.L1 {
		p.W = 0
		return
	}
	s := 1.0
	if p.Z < 0 {
		s = -1
	}
	p.W = -(p.Z - s*o.L1) / ((o.Beta+math.Sqrt(p.N))/o.Alpha + o.L2)
}

// Start implements Optimizer: z is set so that the closed form gives w0
// while n is 0 (when β/α + L2 is 0 no z does, and w0 is kept as it is
// until the first update).
func (o FTRL) Start(w0 float64) Param {
	d := o.Beta/o.Alpha + o.L2
	if w0 == 0 || d == 0 {
		return Param{W: w0}
	}
	return Param{W: w0, Z: -w0*d - math.Copysign(o.L1, w0)}
}

// String implements Optimizer.
func (o FTRL) String() string {
	return fmt.Sprintf("ftrl(alpha=%g, beta=%g, l1=%g, l2=%g)", o.Alpha, o.Beta, o.L1, o.L2)
}

// AdaGrad is SGD with per-coordinate rates (Duchi et al., 2011):
// n ← n + g², w ← w - rate·LR·g/(√n + 10⁻⁸), with g including the L2
// term share·L2·w as SGD's. It keeps n in Param.N.
type AdaGrad struct {
	LR, L2 float64
}

// Update implements Optimizer.
func (o AdaGrad) Update(p *Param, g, share, rate float64) {
	g += share * o.L2 * p.W
	p.N += g * g
	p.W -= rate * o.LR * g / (math.Sqrt(p.N) + 1e-8)
}

// Start implements Optimizer.
func (o AdaGrad) Start(w0 float64) Param { return Param{W: w0} }

// String implements Optimizer.
func (o AdaGrad) String() string { return fmt.Sprintf("adagrad(lr=%g, l2=%g)", o.LR, o.L2) }

// NewOptimizer returns the optimiser named name ("sgd", "adagrad" or
// "ftrl").
func NewOptimizer(name string, lr, alpha, beta, l1, l2 float64) (Optimizer, error) {
	switch name {
	case "sgd", "adagrad":
		if !positive(lr) {
			return nil, fmt.Errorf("-lr must be a positive number")
		}
		if l1 != 0 {
			return nil, fmt.Errorf("-l1 needs -opt=ftrl")
		}
		if !nonNegative(l2) {
			return nil, fmt.Errorf("-l2 must be a number >= 0")
		}
		if name == "adagrad" {
			return AdaGrad{LR: lr, L2: l2}, nil
		}
		return SGD{LR: lr, L2: l2}, nil
	case "ftrl":
		if !positive(alpha) || !nonNegative(beta) || !nonNegative(l1) || !nonNegative(l2) {
			return nil, fmt.Errorf("ftrl needs -alpha > 0 and -beta, -l1, -l2 >= 0 (finite numbers)")
		}
		return FTRL{Alpha: alpha, Beta: beta, L1: l1, L2: l2}, nil
	default:
		return nil, fmt.Errorf("unknown optimiser %q (want sgd, adagrad or ftrl)", name)
	}
}

// positive and nonNegative are false for NaN and infinities, which the
// comparisons alone would let through.
func positive(x float64) bool    { return x > 0 && !math.IsInf(x, 1) }
func nonNegative(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }
