package kv

import (
	"slices"
	"strings"
	"testing"

	"github.com/gopslite/pslite/message"
)

// The flags that let an answer leave its keys out read back from every body
// that carries them, and from nothing else.
func TestPullFlags(t *testing.T) {
	cases := []struct {
		name   string
		body   []byte
		answer bool
		want   uint64
	}{
		{"no body", nil, false, 0},
		{"keys body on a pull", keysBody(flagKeys), false, flagKeys},
		{"keys body on an answer", keysBody(flagKeys), true, flagKeys},
		{"tag with the flag", tagBody(3, 7, flagKeys), false, flagKeys},
		{"tag without it", tagBody(3, 7, 0), false, 0},
		{"tag of an earlier build (no flags)", newBody(kindTag, 4).u(3).u(7).b, false, 0},
		{"answer tag, keys left out", answerTagBody(1, 2, flagKeys|flagChanged), true, flagKeys | flagChanged},
		{"answer tag read as a request's", answerTagBody(1, 2, flagKeys), false, 0},
		{"tag read as an answer's", tagBody(1, 2, flagKeys), true, 0},
		{"keys body cut short", []byte(bodyPrefix + "K"), true, 0},
		{"keys body too long", append(keysBody(flagKeys), 1), true, 0},
		{"error body", []byte(errorBody + "K"), true, 0},
		{"a C++ SimpleApp body", []byte("K\x02"), true, 0},
	}
	for _, c := range cases {
		if got := pullFlags(c.body, c.answer); got != c.want {
			t.Errorf("%s: flags %d, want %d", c.name, got, c.want)
		}
	}
	r, epoch, flags, err := parseTag(newBody(kindTag, 4).u(3).u(7).b[len(bodyPrefix)+1:], 4, false)
	if r != 3 || epoch != 7 || flags != 0 || err != nil {
		t.Errorf("a tag without flags: range %d, epoch %d, flags %d, %v", r, epoch, flags, err)
	}
}

// An answer goes without its keys only when the worker asked for that and
// the answer's keys are the request's own, all of them.
func TestLeavesKeysOut(t *testing.T) {
	keys := []uint64{1, 5, 9}
	asked := KVMeta{Pull: true, keysKnown: keys}
	cases := []struct {
		name string
		req  KVMeta
		res  []uint64
		want bool
	}{
		{"the request's keys", asked, keys, true},
		{"a C++ worker's pull (not asked)", KVMeta{Pull: true}, keys, false},
		{"a copy of the keys", asked, slices.Clone(keys), false},
		{"the first keys only", asked, keys[:2], false},
		{"the keys after the first", asked, keys[1:], false},
		{"no keys", asked, nil, false},
	}
	for _, c := range cases {
		if got := leavesKeysOut(c.req, KVPairs[float32]{Keys: c.res, Vals: make([]float32, len(c.res))}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// An answer without keys is read against the keys the worker sent, and one
// that does not fit them is refused, not read past.
func TestDecodeKeyless(t *testing.T) {
	keys := []uint64{10, 20, 30}
	msg := func(frames ...any) *message.Message {
		m := message.New()
		for _, f := range frames {
			switch f := f.(type) {
			case []float32:
				m.AddData(message.Float, message.Frame(f))
			case []int32:
				m.AddData(message.Int32, message.Frame(f))
			case []uint64:
				m.AddData(message.Uint64, message.Frame(f))
			}
		}
		return m
	}
	got, err := decodeKeyless[float32](msg([]float32{1, 2, 3}), keys)
	if err != nil || !slices.Equal(got.Keys, keys) || !slices.Equal(got.Vals, []float32{1, 2, 3}) {
		t.Errorf("values: %v %v", got, err)
	}
	got, err = decodeKeyless[float32](msg([]float32{1, 2, 3, 4}, []int32{2, 0, 2}), keys)
	if err != nil || !slices.Equal(got.Lens, []int32{2, 0, 2}) || len(got.Vals) != 4 {
		t.Errorf("values and lens: %v %v", got, err)
	}
	bad := []struct {
		name string
		msg  *message.Message
		keys []uint64
		want string
	}{
		{"no frames", msg(), keys, "0 data frames"},
		{"keys, values and lens", msg(keys, []float32{1, 2, 3}, []int32{1, 1, 1}), keys, "3 data frames"},
		{"keys where values belong", msg(keys, []float32{1, 2, 3}), keys, "values frame tagged"},
		{"too few values", msg([]float32{1, 2}), keys, "values"},
		{"lens for other keys", msg([]float32{1, 2}, []int32{1, 1}), keys, "lens"},
		{"lens that do not add up", msg([]float32{1, 2}, []int32{1, 1, 1}), keys, "lens sum"},
		{"an answer to nothing this worker sent", msg([]float32{1}), nil, "did not send"},
	}
	for _, b := range bad {
		if _, err := decodeKeyless[float32](b.msg, b.keys); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want an error with %q", b.name, err, b.want)
		}
	}
}
