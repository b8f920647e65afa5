package van

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"fmt"
)

// CurveKeys is the job's CURVE key pair, Z85-encoded (40 characters each).
// With it every ROUTER is a CURVE server and every DEALER a CURVE client,
// both using this pair, so traffic is encrypted and a peer must hold the
// secret key to connect: a ZAP handler admits only clients that present the
// job's public key. CURVE keys are X25519 keys (as libsodium's crypto_box
// makes them), so they are made and checked here without libzmq.
type CurveKeys struct {
	Public string
	Secret string
}

// NewCurveKeys returns a fresh key pair.
func NewCurveKeys() (CurveKeys, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return CurveKeys{}, fmt.Errorf("van: generate CURVE keys: %w", err)
	}
	return CurveKeys{Public: Z85Encode(k.PublicKey().Bytes()), Secret: Z85Encode(k.Bytes())}, nil
}

// Check verifies that both keys are 40-character Z85 strings and that the
// public key belongs to the secret key.
func (k CurveKeys) Check() error {
	pub, err := Z85Decode(k.Public)
	if err != nil || len(pub) != 32 {
		return errors.New("CURVE public key must be 40 Z85 characters")
	}
	sec, err := Z85Decode(k.Secret)
	if err != nil || len(sec) != 32 {
		return errors.New("CURVE secret key must be 40 Z85 characters")
	}
	priv, err := ecdh.X25519().NewPrivateKey(sec)
	if err != nil {
		return fmt.Errorf("CURVE secret key: %v", err)
	}
	if Z85Encode(priv.PublicKey().Bytes()) != k.Public {
		return errors.New("CURVE public key does not belong to the secret key")
	}
	return nil
}

// z85 is ZeroMQ's Z85 alphabet (ZeroMQ RFC 32).
const z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// Z85Encode encodes b, whose length must be a multiple of 4, in Z85; it
// returns "" otherwise.
func Z85Encode(b []byte) string {
	if len(b)%4 != 0 {
		return ""
	}
	out := make([]byte, 0, len(b)*5/4)
	for i := 0; i < len(b); i += 4 {
		v := uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
		var chunk [5]byte
		for j := 4; j >= 0; j-- {
			chunk[j] = z85[v%85]
			v /= 85
		}
		out = append(out, chunk[:]...)
	}
	return string(out)
}

// Z85Decode decodes a Z85 string, whose length must be a multiple of 5.
func Z85Decode(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, errors.New("z85: length not a multiple of 5")
	}
	out := make([]byte, 0, len(s)*4/5)
	for i := 0; i < len(s); i += 5 {
		var v uint64
		for j := 0; j < 5; j++ {
			d := z85Value(s[i+j])
			if d < 0 {
				return nil, fmt.Errorf("z85: bad character %q", s[i+j])
			}
			v = v*85 + uint64(d)
		}
		if v > 0xffffffff {
			return nil, errors.New("z85: value out of range")
		}
		out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return out, nil
}

func z85Value(c byte) int {
	for i := 0; i < len(z85); i++ {
		if z85[i] == c {
			return i
		}
	}
	return -1
}
