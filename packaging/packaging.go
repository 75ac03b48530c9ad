// Package packaging holds the packaged install of the control plane:
// compose.yaml (the control plane and PostgreSQL, with health checks and
// volumes) and install.sh (install, or upgrade when re-run, backing the
// database up first). Its tests run install.sh against a stand-in for the
// docker command (each decision, install_test.go), against a real Docker
// engine with Compose v2 and images of this tree (docker_test.go), and check
// it with shellcheck.
package packaging

import _ "embed"

// Compose is packaging/compose.yaml.
//
//go:embed compose.yaml
var Compose []byte

// InstallScript is packaging/install.sh.
//
//go:embed install.sh
var InstallScript []byte
