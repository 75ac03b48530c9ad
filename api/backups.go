package api

import "time"

// Backup is one control-plane backup in the destination, as its manifest
// describes it (the dump's file name, never a path on the server's disk).
type Backup struct {
	Dump          string    `json:"dump"`
	Version       string    `json:"version"`
	Time          time.Time `json:"time"`
	Trigger       string    `json:"trigger"`
	TargetVersion string    `json:"targetVersion,omitempty"`
	DatabaseSize  int64     `json:"databaseSizeBytes"`
	DumpSize      int64     `json:"dumpSizeBytes"`
	SHA256        string    `json:"sha256"`
}
