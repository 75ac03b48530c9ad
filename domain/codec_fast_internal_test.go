package domain

import (
	"bytes"
	"testing"
)

// plainASCII finds the first special byte wherever it is in the eight-byte
// words it tests, and whatever plain bytes surround it.
func TestPlainASCIIFindsEverySpecialByte(t *testing.T) {
	t.Parallel()
	naive := func(data []byte, i int) int {
		for ; i < len(data); i++ {
			if c := data[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
				return i
			}
		}
		return i
	}
	for _, fill := range []byte{'a', ' ', 0x7f, '!', '#', '[', ']', '~', 0x21} {
		for n := 0; n <= 40; n++ {
			plain := bytes.Repeat([]byte{fill}, n)
			for start := 0; start <= n; start++ {
				if got, want := plainASCII(plain, start), naive(plain, start); got != want {
					t.Fatalf("%q from %d: %d, want %d", plain, start, got, want)
				}
			}
			for at := 0; at < n; at++ {
				for _, special := range []byte{'"', '\\', 0, 0x01, 0x1f, 0x80, 0xc3, 0xff} {
					data := bytes.Clone(plain)
					data[at] = special
					for start := 0; start <= n; start++ {
						if got, want := plainASCII(data, start), naive(data, start); got != want {
							t.Fatalf("%q from %d: %d, want %d", data, start, got, want)
						}
					}
				}
			}
		}
	}
}
