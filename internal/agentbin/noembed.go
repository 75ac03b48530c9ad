//go:build !embedagent

package agentbin

import "io/fs"

// embedded is nil without the build tag embedagent: no agent binaries.
var embedded fs.FS
