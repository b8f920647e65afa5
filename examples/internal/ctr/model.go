package ctr

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// modelFormat is the first line of a model file; modelFormatV1 that of the
// files earlier versions wrote (no hashing, no optimiser state), which
// ReadModel still reads.
const (
	modelFormat   = "pslite-lr 2"
	modelFormatV1 = "pslite-lr 1"
)

// Model is a trained linear classifier, kept sparsely: IDs are the feature
// ids (0 the bias, then the data's ids, hashed when HashBits > 0) that have
// a weight or optimiser state, ascending, and with C = Labels.Outputs()
// outputs per feature W[i*C+c] is the weight of IDs[i] for output c. Binary
// logistic regression has one output, the log-odds of class 1; softmax
// regression one per class. Z and N, when not nil, are FTRL's accumulators
// per weight, so that training can continue from the model (-init-model).
type Model struct {
	Labels   Labels
	Bias     float32 // value of the bias feature 0 (0: no bias)
	HashBits int     // 0: the data's ids are the features
	Binary   bool    // every non-zero feature value counts as 1
	IDs      []uint64
	W        []float32
	Z, N     []float64

	// Factor models (programs fm and mvm): Factors describes them (nil for
	// logistic regression) and V[i*K:(i+1)*K] are the factors of IDs[i]. A
	// feature the model lacks has weight 0 and the factors every key
	// starts with, initFactor(id·K+f, InitSeed, InitStd).
	Factors  *Factors
	V        []float32
	InitStd  float64
	InitSeed uint64

	lookup func(id uint64) int // position in IDs, or -1; built on first use
}

// Outputs returns the weights per feature.
func (m *Model) Outputs() int { return m.Labels.Outputs() }

// MaxID returns the largest feature id the model has (0 when none).
func (m *Model) MaxID() uint64 {
	if len(m.IDs) == 0 {
		return 0
	}
	return m.IDs[len(m.IDs)-1]
}

// pos returns the position of feature id in IDs, or -1.
func (m *Model) pos(id uint64) int {
	if m.lookup == nil {
		if m.MaxID() < 1<<22 {
			dense := make([]int32, m.MaxID()+1)
			for i := range dense {
				dense[i] = -1
			}
			for i, f := range m.IDs {
				dense[f] = int32(i)
			}
			m.lookup = func(id uint64) int {
				if id < uint64(len(dense)) {
					return int(dense[id])
				}
				return -1
			}
		} else {
			index := make(map[uint64]int32, len(m.IDs))
			for i, f := range m.IDs {
				index[f] = int32(i)
			}
			m.lookup = func(id uint64) int {
				if p, ok := index[id]; ok {
					return int(p)
				}
				return -1
			}
		}
	}
	return m.lookup(id)
}

// margins computes the outputs Σ w·x of one example (feature ids and values,
// nil: all 1) into z, the bias first, then the features in order; features
// the model lacks count zero.
func (m *Model) margins(ids []uint64, val []float32, z []float64) {
	C := len(z)
	clear(z)
	if m.Bias != 0 {
		if p := m.pos(0); p >= 0 {
			for c := range z {
				z[c] = float64(m.W[p*C+c]) * float64(m.Bias)
			}
		}
	}
	for j, id := range ids {
		p := m.pos(id)
		if p < 0 {
			continue
		}
		x := 1.0
		if val != nil {
			x = float64(val[j])
		}
		for c := range z {
			z[c] += float64(m.W[p*C+c]) * x
		}
	}
}

// Write stores m as text: a header of "key value" lines, then "w FEATURE
// OUTPUT WEIGHT" for every non-zero weight, followed by FTRL's Z and N when
// the model keeps them (then also for zero weights with state). See
// README.md.
func (m *Model) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	loss := "logistic"
	if m.Labels.Softmax {
		loss = "softmax"
	}
	labels := make([]string, len(m.Labels.Values))
	for i, v := range m.Labels.Values {
		labels[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	C := m.Outputs()
	state := "none"
	if m.Z != nil {
		state = "ftrl"
	}
	keep := func(i int) bool {
		return m.W[i] != 0 || (m.Z != nil && (m.Z[i] != 0 || m.N[i] != 0)) || m.Factors != nil
	}
	nnz := 0
	for i := range m.W {
		if keep(i) {
			nnz++
		}
	}
	fmt.Fprintf(bw, "%s\nloss %s\nlabels %s\noutputs %d\nfeatures %d\nbias %s\nhash-bits %d\nstate %s\n",
		modelFormat, loss, strings.Join(labels, " "), C, m.MaxID()+1,
		strconv.FormatFloat(float64(m.Bias), 'g', -1, 32), m.HashBits, state)
	if fc := m.Factors; fc != nil {
		fmt.Fprintf(bw, "model %s\nfactors %d\nviews %d\ninit %s %d\n", fc.Kind, fc.K, fc.Views,
			strconv.FormatFloat(m.InitStd, 'g', -1, 64), m.InitSeed)
	}
	if m.Binary {
		fmt.Fprintf(bw, "values binary\n")
	}
	fmt.Fprintf(bw, "weights %d\n", nnz)
	var buf []byte
	for i := range m.W {
		if !keep(i) {
			continue
		}
		buf = append(buf[:0], "w "...)
		buf = strconv.AppendUint(buf, m.IDs[i/C], 10)
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, int64(i%C), 10)
		buf = append(buf, ' ')
		buf = strconv.AppendFloat(buf, float64(m.W[i]), 'g', -1, 32)
		if m.Z != nil {
			buf = append(buf, ' ')
			buf = strconv.AppendFloat(buf, m.Z[i], 'g', -1, 64)
			buf = append(buf, ' ')
			buf = strconv.AppendFloat(buf, m.N[i], 'g', -1, 64)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	if fc := m.Factors; fc != nil {
		for i, v := range m.V {
			buf = append(buf[:0], "v "...)
			buf = strconv.AppendUint(buf, m.IDs[i/fc.K], 10)
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, int64(i%fc.K), 10)
			buf = append(buf, ' ')
			buf = strconv.AppendFloat(buf, float64(v), 'g', -1, 32)
			buf = append(buf, '\n')
			if _, err := bw.Write(buf); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// ReadModel parses a model written by Model.Write (or by version 1).
func ReadModel(r io.Reader) (*Model, error) {
	sc := bufio.NewScanner(r)
	line := 0
	fail := func(format string, args ...any) (*Model, error) {
		return nil, fmt.Errorf("model line %d: %s", line, fmt.Sprintf(format, args...))
	}
	line = 1
	if !sc.Scan() || (sc.Text() != modelFormat && sc.Text() != modelFormatV1) {
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return fail("want %q", modelFormat)
	}
	m := &Model{}
	outputs, weights, seen := -1, -1, 0
	haveLoss, header := false, true
	state := "none"
	type wline struct {
		id     uint64
		out    int
		w      float32
		z, n   float64
		lineNo int
	}
	var ws []wline
	var fc *Factors
	type vline struct {
		id     uint64
		f      int
		v      float32
		lineNo int
	}
	var vs []vline
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "v" {
			if header || fc == nil {
				return fail("factors in a model without them, or before its weights")
			}
			if len(f) != 4 {
				return fail("want: v FEATURE FACTOR VALUE")
			}
			id, err1 := strconv.ParseUint(f[1], 10, 64)
			j, err2 := strconv.Atoi(f[2])
			v, err3 := strconv.ParseFloat(f[3], 32)
			if err1 != nil || err2 != nil || err3 != nil || j < 0 || j >= fc.K || math.IsNaN(v) || math.IsInf(v, 0) {
				return fail("bad factor %q", sc.Text())
			}
			if (m.HashBits == 0 && id > maxFeatureID) || (m.HashBits > 0 && id >= 1<<m.HashBits) {
				return fail("feature id %d out of range", id)
			}
			vs = append(vs, vline{id: id, f: j, v: float32(v), lineNo: line})
			continue
		}
		if f[0] == "w" {
			if header {
				return fail("weights before the header is complete")
			}
			want := 4
			if state == "ftrl" {
				want = 6
			}
			if len(f) != want {
				if want == 6 {
					return fail("want: w FEATURE OUTPUT WEIGHT Z N")
				}
				return fail("want: w FEATURE OUTPUT WEIGHT")
			}
			id, err1 := strconv.ParseUint(f[1], 10, 64)
			out, err2 := strconv.Atoi(f[2])
			v, err3 := strconv.ParseFloat(f[3], 32)
			if err1 != nil || err2 != nil || err3 != nil || out < 0 || out >= outputs || math.IsNaN(v) || math.IsInf(v, 0) {
				return fail("bad weight %q", sc.Text())
			}
			if (m.HashBits == 0 && id > maxFeatureID) || (m.HashBits > 0 && id >= 1<<m.HashBits) {
				return fail("feature id %d out of range", id)
			}
			wl := wline{id: id, out: out, w: float32(v), lineNo: line}
			if state == "ftrl" {
				z, err1 := strconv.ParseFloat(f[4], 64)
				n, err2 := strconv.ParseFloat(f[5], 64)
				if err1 != nil || err2 != nil || n < 0 || math.IsNaN(z) || math.IsInf(z, 0) || math.IsInf(n, 0) {
					return fail("bad state %q", sc.Text())
				}
				wl.z, wl.n = z, n
			}
			ws = append(ws, wl)
			seen++
			continue
		}
		if !header {
			return fail("header line %q after the weights began", f[0])
		}
		if len(f) < 2 {
			return fail("want a key and a value")
		}
		var err error
		switch f[0] {
		case "loss":
			haveLoss = true
			switch f[1] {
			case "softmax":
				m.Labels.Softmax = true
			case "logistic":
			default:
				return fail("unknown loss %q", f[1])
			}
		case "labels":
			for _, s := range f[1:] {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return fail("bad label %q", s)
				}
				m.Labels.Values = append(m.Labels.Values, v)
			}
		case "outputs":
			outputs, err = strconv.Atoi(f[1])
		case "features":
			_, err = strconv.ParseUint(f[1], 10, 64) // informative only
		case "bias":
			var b float64
			b, err = strconv.ParseFloat(f[1], 32)
			m.Bias = float32(b)
		case "hash-bits":
			m.HashBits, err = strconv.Atoi(f[1])
			if err == nil && (m.HashBits < 0 || m.HashBits > maxHashBits) {
				return fail("hash-bits %d out of range", m.HashBits)
			}
		case "state":
			state = f[1]
			if state != "none" && state != "ftrl" {
				return fail("unknown state %q", state)
			}
		case "values":
			if f[1] != "binary" {
				return fail("unknown values %q", f[1])
			}
			m.Binary = true
		case "model":
			if f[1] != kindFM && f[1] != kindMVM {
				return fail("unknown model %q", f[1])
			}
			fc = &Factors{Kind: f[1]}
			m.Factors = fc
		case "factors", "views", "init":
			if fc == nil {
				return fail("%s before the model line", f[0])
			}
			switch f[0] {
			case "factors":
				fc.K, err = strconv.Atoi(f[1])
				if err == nil && (fc.K < 1 || fc.K > maxFactors) {
					return fail("factors %d out of range", fc.K)
				}
			case "views":
				fc.Views, err = strconv.Atoi(f[1])
				if err == nil && (fc.Views < 0 || fc.Views > maxFields || fc.K == 0) {
					return fail("views %d out of range (or before factors)", fc.Views)
				}
			case "init":
				if len(f) != 3 {
					return fail("want: init STD SEED")
				}
				m.InitStd, err = strconv.ParseFloat(f[1], 64)
				if err == nil {
					m.InitSeed, err = strconv.ParseUint(f[2], 10, 64)
				}
			}
		case "weights":
			weights, err = strconv.Atoi(f[1])
			if err == nil {
				if !haveLoss || len(m.Labels.Values) < 2 || outputs != m.Labels.Outputs() || weights < 0 ||
					(fc != nil && (fc.K == 0 || outputs != 1 || (fc.Kind == kindMVM && fc.Views == 0))) {
					return fail("incomplete or inconsistent header")
				}
				header = false
			}
		default:
			return fail("unknown key %q", f[0])
		}
		if err != nil {
			return fail("bad %s %q", f[0], f[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if header {
		return fail("no weights line")
	}
	if seen != weights {
		return fail("%d weights but the header says %d", seen, weights)
	}
	if fc != nil {
		// Every feature with factors is one of the model's: those without
		// a weight line have weight 0.
		have := make(map[uint64]bool, len(ws))
		for _, wl := range ws {
			have[wl.id] = true
		}
		for _, vl := range vs {
			if !have[vl.id] {
				have[vl.id] = true
				ws = append(ws, wline{id: vl.id, lineNo: vl.lineNo})
			}
		}
	}
	slices.SortStableFunc(ws, func(a, b wline) int {
		switch {
		case a.id != b.id:
			if a.id < b.id {
				return -1
			}
			return 1
		}
		return a.out - b.out
	})
	C := outputs
	for i, wl := range ws {
		if i > 0 && wl.id == ws[i-1].id && wl.out == ws[i-1].out {
			line = wl.lineNo
			return fail("a second weight for feature %d output %d", wl.id, wl.out)
		}
		if len(m.IDs) == 0 || m.IDs[len(m.IDs)-1] != wl.id {
			m.IDs = append(m.IDs, wl.id)
			m.W = append(m.W, make([]float32, C)...)
			if state == "ftrl" {
				m.Z = append(m.Z, make([]float64, C)...)
				m.N = append(m.N, make([]float64, C)...)
			}
		}
		p := (len(m.IDs)-1)*C + wl.out
		m.W[p] = wl.w
		if state == "ftrl" {
			m.Z[p], m.N[p] = wl.z, wl.n
		}
	}
	if state == "ftrl" && m.Z == nil {
		m.Z, m.N = []float64{}, []float64{}
	}
	if fc != nil {
		m.V = make([]float32, len(m.IDs)*fc.K)
		set := make([]bool, len(m.V))
		for _, vl := range vs {
			p := m.pos(vl.id)*fc.K + vl.f
			if set[p] {
				line = vl.lineNo
				return fail("a second factor %d for feature %d", vl.f, vl.id)
			}
			m.V[p], set[p] = vl.v, true
		}
		for p, ok := range set {
			if !ok {
				m.V[p] = float32(initFactor(m.IDs[p/fc.K]*uint64(fc.K)+uint64(p%fc.K), m.InitSeed, m.InitStd))
			}
		}
	}
	return m, nil
}

// readModelFile reads the model at path.
func readModelFile(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := ReadModel(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ScoreFile scores m on the data at path (the first limit examples when
// limit > 0), reading it as a stream: memory grows with the distinct
// feature ids, not with the examples. With pred not nil it writes a
// prediction per example: a first line "labels L0 L1 ..." (the classes in
// model order), then per example the predicted label and the probability
// of each class, in the format of liblinear-predict -b 1.
func ScoreFile(m *Model, path string, limit int, pred io.Writer) (*Metrics, error) {
	var bw *bufio.Writer
	if pred != nil {
		bw = bufio.NewWriterSize(pred, 1<<16)
		fmt.Fprint(bw, "labels")
		for _, v := range m.Labels.Values {
			fmt.Fprintf(bw, " %s", strconv.FormatFloat(v, 'g', -1, 64))
		}
		fmt.Fprintln(bw)
	}
	C := m.Outputs()
	met := newMetrics(C == 1)
	z := make([]float64, C)
	prob := make([]float64, m.Labels.K())
	var ids []uint64
	var buf []byte
	rows := 0
	vocab := NewVocab()
	var fs factorRow
	score := func(label float64, idx []int32, val []float32, fld []int32) error {
		rows++
		y := m.Labels.classOf(label)
		if y < 0 {
			return fmt.Errorf("label %v is not one of the model's classes %v", label, m.Labels.Values)
		}
		ids = ids[:0]
		for _, f := range idx {
			ids = append(ids, vocab.IDs[f])
		}
		if m.Factors != nil {
			var err error
			if z[0], err = fs.margin(m, ids, val, fld); err != nil {
				return err
			}
		} else {
			m.margins(ids, val, z)
		}
		if C == 1 {
			pos := y == 1
			sign := -1.0
			if pos {
				sign = 1
			}
			met.LossSum += softplus(-sign * z[0])
			if (z[0] > 0) == pos {
				met.Correct++
			}
			met.add(z[0], pos)
			prob[1] = sigmoid(z[0])
			prob[0] = 1 - prob[1]
		} else {
			best, zmax := 0, z[0]
			for c, v := range z {
				if v > zmax {
					best, zmax = c, v
				}
			}
			var se float64
			for _, v := range z {
				se += math.Exp(v - zmax)
			}
			lse := zmax + math.Log(se)
			met.LossSum += lse - z[y]
			if best == y {
				met.Correct++
			}
			for c := range z {
				prob[c] = math.Exp(z[c] - lse)
			}
		}
		met.N++
		if bw != nil {
			best := 0
			for c := range prob {
				if prob[c] > prob[best] {
					best = c
				}
			}
			buf = strconv.AppendFloat(buf[:0], m.Labels.Values[best], 'g', -1, 64)
			for _, p := range prob {
				buf = append(buf, ' ')
				buf = strconv.AppendFloat(buf, p, 'g', 6, 64)
			}
			buf = append(buf, '\n')
			if _, err := bw.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
	o := ReadOptions{Limit: limit, HashBits: m.HashBits, Vocab: vocab, Binary: m.Binary}
	if err := StreamData(path, o, score); err != nil {
		return nil, err
	}
	if bw != nil {
		if err := bw.Flush(); err != nil {
			return nil, err
		}
	}
	return met, nil
}

// StreamData calls row for every example of the data at path (LIBSVM or
// IDX, as LoadData reads), in order, without keeping them; idx are local
// indices of o.Vocab.
func StreamData(path string, o ReadOptions, row func(label float64, idx []int32, val []float32, fld []int32) error) error {
	if o.Vocab == nil {
		o.Vocab = NewVocab()
	}
	o.Rank, o.Workers = 0, 1
	var in io.Reader
	name := path
	if path == "-" {
		in, name = os.Stdin, "standard input"
	} else {
		images, _, _ := strings.Cut(path, ",")
		f, err := openMaybeGzip(images)
		if err != nil {
			return err
		}
		defer f.Close()
		br := bufio.NewReaderSize(f, 1<<20)
		if head, err := br.Peek(4); err == nil && head[0] == 0 && head[1] == 0 && head[2] == 0x08 && head[3] == 3 {
			// IDX files are small: load, then stream the rows.
			d, err := LoadData(path, o)
			if err != nil {
				return err
			}
			for i := 0; i < d.Len(); i++ {
				idx, val := d.Row(i)
				if err := row(d.Label[i], idx, val, nil); err != nil {
					return fmt.Errorf("%s: example %d: %w", path, i+1, err)
				}
			}
			return nil
		}
		in, name = br, images
	}
	p := newLIBSVMParser(name, o)
	p.onRow = row
	err := p.scan(in, -1)
	var pe *ParseError
	if err != nil && !errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", name, err)
	}
	return err
}

// factorRow scores single rows with a factor model's Model, through the
// same code as training (Factors.margin over a batch of one row).
type factorRow struct {
	b    Batch
	w, v []float32
	sc   *fmScratch
}

// margin returns the margin of the row with feature ids, values (nil: all
// 1) and fields (nil: none) under m, whose Factors is not nil.
func (r *factorRow) margin(m *Model, ids []uint64, val []float32, fld []int32) (float64, error) {
	fc := *m.Factors
	K := fc.K
	if fc.Kind == kindMVM {
		if fld == nil {
			return 0, fmt.Errorf("a multi-view model scores libffm data (field:feature:value): this row has no fields")
		}
		for _, f := range fld {
			if int(f) >= fc.Views {
				return 0, fmt.Errorf("field %d, but the model has views 0..%d", f, fc.Views-1)
			}
		}
	}
	if r.sc == nil {
		r.sc = fc.newScratch()
	}
	n := len(ids)
	b := &r.b
	b.Feats, b.Pos = b.Feats[:0], b.Pos[:0]
	for i := 0; i < n; i++ {
		b.Feats = append(b.Feats, int32(i))
		b.Pos = append(b.Pos, int32(i))
	}
	b.Start = append(b.Start[:0], 0, int32(n))
	b.Val, b.Field = val, fld
	l := Weights{C: 1, Bias: m.Bias}
	r.w, r.v = r.w[:0], r.v[:0]
	if m.Bias != 0 {
		var wb float32
		if p := m.pos(0); p >= 0 {
			wb = m.W[p]
		}
		r.w = append(r.w, wb)
	}
	for _, id := range ids {
		if p := m.pos(id); p >= 0 {
			r.w = append(r.w, m.W[p])
			r.v = append(r.v, m.V[p*K:p*K+K]...)
			continue
		}
		r.w = append(r.w, 0)
		for f := 0; f < K; f++ {
			r.v = append(r.v, float32(initFactor(id*uint64(K)+uint64(f), m.InitSeed, m.InitStd)))
		}
	}
	return fc.margin(b, 0, l, r.w, r.v, r.sc), nil
}
