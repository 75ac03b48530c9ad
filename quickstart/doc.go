// Package quickstart holds the test that runs the README's quick start as
// written: its shell blocks, with the real nebula binary, against a real
// control plane (nebula serve on a real PostgreSQL) and a real Kubernetes API
// server, with only the registry host (and the control plane's address)
// replaced by the test's.
package quickstart
