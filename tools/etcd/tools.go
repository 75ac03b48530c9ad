//go:build tools

// Package tools pins the etcd server.
package tools

import _ "go.etcd.io/etcd/server/v3"
