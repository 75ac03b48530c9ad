package forge_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/nebulactrl/nebulactrl/internal/forge"
)

// The two benchmarks take the same body, GitHub's branch push example
// (about 9 KiB), so that what Verify costs beyond the HMAC it must compute
// anyway (header lookups, JSON parse, cleaning) reads off their ratio.

func BenchmarkVerifyGitHub(b *testing.B) {
	body := load(b, "github/push-branch-created.json")
	h := githubHeaders(b, secret, body, "push")
	secrets := forge.Secrets{secret}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := forge.Verify(h, body, secrets); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBareHMAC(b *testing.B) {
	body := load(b, "github/push-branch-created.json")
	want, err := hex.DecodeString(hexMAC(secret, body))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		m := hmac.New(sha256.New, secret)
		m.Write(body)
		if !hmac.Equal(m.Sum(nil), want) {
			b.Fatal("no match")
		}
	}
}
