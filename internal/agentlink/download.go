package agentlink

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Binary returns the agent binary served for arch (its SHA-256 goes into an
// agent_upgrade): agentbin.ErrUnknownArch or agentbin.ErrNoBinary when
// there is none.
func (l *Link) Binary(arch string) (agentbin.Binary, error) { return l.cfg.Binaries.Binary(arch) }

// Download serves GET /agent/v1/download/{file}: the agent binary of the
// control plane's version for file = amd64 or arm64, or its SHA-256 in hex
// for file = <arch>.sha256. Only to an agent's own valid credential (the
// same check as its websocket). The binary's answer carries the checksum in
// X-Checksum-Sha256. Unknown architecture: 404 unknown_architecture; a
// control plane built without that binary: 404 no_agent_binary.
func (l *Link) Download(w http.ResponseWriter, r *http.Request) {
	if _, err := l.Authenticate(r); err != nil {
		if errors.Is(err, transport.ErrUnavailable) {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the credential cannot be checked now; try again shortly")
			return
		}
		writeError(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return
	}
	file := r.PathValue("file")
	arch, sumOnly := strings.CutSuffix(file, ".sha256")
	b, err := l.cfg.Binaries.Binary(arch)
	switch {
	case errors.Is(err, agentbin.ErrUnknownArch):
		writeError(w, http.StatusNotFound, "unknown_architecture", fmt.Sprintf("no agent binary for architecture %q: the control plane serves %s", truncateUTF8(arch, 40), strings.Join(agentbin.Arches, ", ")))
		return
	case errors.Is(err, agentbin.ErrNoBinary):
		writeError(w, http.StatusNotFound, "no_agent_binary", "this control plane was built without the agent binary for "+arch+" (build it with go tool task build)")
		return
	case err != nil:
		l.cfg.Logger.Error("reading an agent binary", "arch", arch, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
		return
	}
	w.Header().Set("X-Checksum-Sha256", b.SHA256)
	w.Header().Set("Cache-Control", "no-store")
	if sumOnly {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintf(w, "%s  %s\n", b.SHA256, agentbin.FileName(arch))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b.Data)))
	w.Header().Set("Content-Disposition", `attachment; filename="`+agentbin.FileName(arch)+`"`)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b.Data)
}
