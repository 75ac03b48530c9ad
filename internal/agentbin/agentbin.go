// Package agentbin holds the agent binaries the control plane serves at
// /agent/v1/download/<arch>, one per architecture, of the control plane's
// own version. `go tool task build` cross-compiles cmd/nebulactrl-agent for
// linux/amd64 and linux/arm64 into dist/ and builds cmd/nebula with the
// build tag embedagent, which embeds them; a plain `go build` embeds none,
// and the control plane then answers no_agent_binary.
package agentbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Arches are the architectures the control plane serves agents for.
var Arches = []string{"amd64", "arm64"}

// FileName is the name of the agent binary for arch in dist/ (and in a Dir).
func FileName(arch string) string { return "nebulactrl-agent-linux-" + arch }

var (
	// ErrUnknownArch is an architecture the control plane has no agent for.
	ErrUnknownArch = errors.New("unknown architecture")
	// ErrNoBinary is a known architecture whose binary this control plane
	// was built without (a plain go build).
	ErrNoBinary = errors.New("this control plane was built without the agent binary for that architecture")
)

// Binary is one agent binary.
type Binary struct {
	Arch string
	// SHA256 is the hex SHA-256 of Data.
	SHA256 string
	Data   []byte
}

// Reader returns the binary's content.
func (b Binary) Reader() io.ReadSeeker { return bytes.NewReader(b.Data) }

// Source gives the agent binary of an architecture: ErrUnknownArch,
// ErrNoBinary, or the binary.
type Source interface {
	Binary(arch string) (Binary, error)
}

// Known reports whether arch is one the control plane serves.
func Known(arch string) bool { return slices.Contains(Arches, arch) }

// fsSource reads binaries from a file system, hashing each once.
type fsSource struct {
	fsys fs.FS
	mu   sync.Mutex
	seen map[string]Binary
}

func (s *fsSource) Binary(arch string) (Binary, error) {
	if !Known(arch) {
		return Binary{}, fmt.Errorf("%w %q", ErrUnknownArch, arch)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.seen[arch]; ok {
		return b, nil
	}
	if s.fsys == nil {
		return Binary{}, ErrNoBinary
	}
	data, err := fs.ReadFile(s.fsys, FileName(arch))
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(data) == 0 {
		return Binary{}, ErrNoBinary
	}
	if err != nil {
		return Binary{}, fmt.Errorf("reading the agent binary for %s: %w", arch, err)
	}
	sum := sha256.Sum256(data)
	b := Binary{Arch: arch, SHA256: hex.EncodeToString(sum[:]), Data: data}
	s.seen[arch] = b
	return b, nil
}

// embeddedSource serves what embed.go embedded (build tag embedagent), or
// nothing (noembed.go).
var embeddedSource = &fsSource{fsys: embedded, seen: map[string]Binary{}}

// Embedded returns the binaries built into this control plane (none
// without the build tag embedagent).
func Embedded() Source { return embeddedSource }

// Dir returns the binaries in a directory, named as FileName gives (tests,
// and a control plane pointed at binaries built apart).
func Dir(path string) Source {
	return &fsSource{fsys: os.DirFS(filepath.Clean(path)), seen: map[string]Binary{}}
}
