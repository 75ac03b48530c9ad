//go:build embedagent

package agentbin

import (
	"embed"
	"io/fs"
)

// dist is filled by `go tool task build` (cross-compiled agents) before the
// control plane is built with -tags embedagent.
//
//go:embed dist
var dist embed.FS

var embedded = func() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err)
	}
	return sub
}()
