// Package migrations holds the append-only SQL migrations of the control
// plane's database, embedded into the binary. Never edit or reorder a
// migration that has shipped: add a new one.
package migrations

import "embed"

// FS holds the migrations, named NNNNN_name.sql in goose's format.
//
//go:embed *.sql
var FS embed.FS
