//go:build embedagent

package agentbin

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// With -tags embedagent (after go tool task build filled dist/), the
// control plane serves exactly the cross-compiled binaries, with their
// SHA-256: go test -tags embedagent ./agentbin/
func TestEmbeddedBinariesAreTheBuiltOnes(t *testing.T) {
	for _, arch := range Arches {
		want, err := os.ReadFile(filepath.Join("dist", FileName(arch)))
		if err != nil {
			t.Fatalf("dist/ lacks the %s agent (run go tool task build): %v", arch, err)
		}
		b, err := Embedded().Binary(arch)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		sum := sha256.Sum256(want)
		if b.SHA256 != hex.EncodeToString(sum[:]) || len(b.Data) != len(want) {
			t.Fatalf("%s: the embedded binary is not the built one", arch)
		}
	}
	if _, err := Embedded().Binary("riscv64"); err == nil {
		t.Fatal("riscv64 is not served")
	}
}
