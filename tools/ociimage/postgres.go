package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Postgres is a PostgreSQL server image made of this machine's Debian
// PostgreSQL packages (the server binaries, their extension libraries and
// share directory, every shared library ldd names, the system time zones),
// a static busybox as its shell, and an entrypoint that honours the official
// image's POSTGRES_USER, POSTGRES_DB, POSTGRES_PASSWORD and PGDATA. It stands
// in for postgres:15 where no public registry is reachable: the packaged
// install's tests run compose.yaml with it (POSTGRES_IMAGE). It is not
// published.
const Postgres Kind = "postgres"

// PostgreSQL's user in the image, as in the official image.
const (
	PostgresUID = 999
	PGData      = "/var/lib/postgresql/data"
	PGSocketDir = "/var/run/postgresql"
	Entrypoint  = "/usr/local/bin/docker-entrypoint.sh"
	Busybox     = "/bin/busybox"
)

// entrypoint initialises PGDATA on the first start like the official
// image's docker-entrypoint.sh (the superuser POSTGRES_USER with
// POSTGRES_PASSWORD, scram-sha-256 over TCP, trust on the socket, the
// database POSTGRES_DB), then execs postgres: it is PID 1 and stops on the
// image's stop signal, SIGINT (a fast shutdown).
const entrypoint = `#!/bin/sh
set -eu
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
if [ "$#" -eq 0 ]; then set -- postgres; fi
if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
  user="${POSTGRES_USER:-postgres}"
  db="${POSTGRES_DB:-$user}"
  mkdir -p "$PGDATA"
  chmod 700 "$PGDATA"
  pw="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
  initdb --username="$user" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C -D "$PGDATA" >/dev/null
  rm -f "$pw"
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    printf 'CREATE DATABASE "%s";\n' "$db" | postgres --single -D "$PGDATA" -c jit=off postgres >/dev/null
  fi
  echo "docker-entrypoint.sh: initialised $PGDATA (user $user, database $db)" >&2
fi
if [ "$1" = postgres ]; then
  shift
  exec postgres -c listen_addresses='*' -c jit=off "$@"
fi
exec "$@"
`

// postgresTools are the server's programs the image carries.
var postgresTools = []string{"postgres", "initdb", "pg_ctl", "pg_isready", "pg_dump", "pg_restore", "psql"}

// busyboxApplets are the commands the entrypoint and a health check use.
var busyboxApplets = []string{"sh", "cat", "chmod", "echo", "env", "id", "ls", "mkdir", "mktemp", "rm", "sleep", "test", "printf"}

// lddLibs lists the shared libraries ldd names for a program or library
// (the dynamic loader too); ok is false when one is not found.
func lddLibs(p string) (libs []string, ok bool, err error) {
	out, err := exec.Command("ldd", p).Output()
	if err != nil {
		return nil, false, fmt.Errorf("ldd %s: %w", p, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "not found") {
			return nil, false, nil
		}
		if m := lddLine.FindStringSubmatch(sc.Text()); m != nil {
			libs = append(libs, m[1])
		}
	}
	return libs, true, nil
}

// treeFiles copies a directory tree (regular files, directories and
// symlinks) to the same paths; skip leaves out paths it answers true for.
func treeFiles(root string, skip func(string) bool) ([]file, error) {
	var files []file
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skip != nil && skip(p) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			files = append(files, file{name: p, mode: 0o755, dir: true})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			files = append(files, file{name: p, mode: 0o777, link: target})
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, file{name: p, mode: int64(info.Mode().Perm()), data: b})
		}
		return nil
	})
	return files, err
}

// pgConfig asks pg_config beside the server's binaries for a directory.
func pgConfig(binDir, what string) (string, error) {
	out, err := exec.Command(filepath.Join(binDir, "pg_config"), "--"+what).Output()
	if err != nil {
		return "", fmt.Errorf("pg_config --%s in %s: %w (is the PostgreSQL server package installed? scripts/ensure-postgres.sh)", what, binDir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// postgresFiles are the image's files: PostgreSQL's programs, libraries
// and data files from this machine, busybox, users, directories and the
// entrypoint.
func postgresFiles(binDir string) ([][]file, error) {
	libDir, err := pgConfig(binDir, "pkglibdir")
	if err != nil {
		return nil, err
	}
	shareDir, err := pgConfig(binDir, "sharedir")
	if err != nil {
		return nil, err
	}
	var pg []file
	needs := map[string]bool{}
	for _, tool := range postgresTools {
		p := filepath.Join(binDir, tool)
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		libs, ok, err := lddLibs(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("ldd %s: a library is not found", p)
		}
		for _, l := range libs {
			needs[l] = true
		}
		pg = append(pg, file{name: p, mode: 0o755, data: b})
	}
	// The extension libraries, but JIT (LLVM is large, and jit is off).
	ext, err := treeFiles(libDir, func(p string) bool {
		b := filepath.Base(p)
		return strings.HasPrefix(b, "llvmjit") || b == "bitcode" || b == "pgxs"
	})
	if err != nil {
		return nil, err
	}
	for _, f := range ext {
		if f.dir || f.link != "" || !strings.HasSuffix(f.name, ".so") {
			pg = append(pg, f)
			continue
		}
		libs, ok, err := lddLibs(f.name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // an extension whose library is not installed here
		}
		for _, l := range libs {
			needs[l] = true
		}
		pg = append(pg, f)
	}
	share, err := treeFiles(shareDir, nil)
	if err != nil {
		return nil, err
	}
	pg = append(pg, share...)
	// Debian's PostgreSQL reads the system's time zones.
	if _, err := os.Stat("/usr/share/zoneinfo"); err == nil {
		zones, err := treeFiles("/usr/share/zoneinfo", nil)
		if err != nil {
			return nil, err
		}
		pg = append(pg, zones...)
	}
	names := make([]string, 0, len(needs))
	for l := range needs {
		names = append(names, l)
	}
	sort.Strings(names)
	var libs []file
	for _, l := range names {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", l, err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", real, err)
		}
		libs = append(libs, file{name: l, mode: 0o755, data: b})
	}

	bb, err := os.ReadFile(Busybox)
	if err != nil {
		return nil, fmt.Errorf("reading %s (Debian's busybox-static, the image's shell): %w", Busybox, err)
	}
	if f, err := elfStatic(bb); err != nil || !f {
		return nil, fmt.Errorf("%s is not a static binary: install busybox-static", Busybox)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\npostgres:x:%d:%d:PostgreSQL administrator:/var/lib/postgresql:/bin/sh\n", PostgresUID, PostgresUID)
	group := fmt.Sprintf("root:x:0:\npostgres:x:%d:\n", PostgresUID)
	base := []file{
		{name: Busybox, mode: 0o755, data: bb},
		{name: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "/etc/group", mode: 0o644, data: []byte(group)},
		{name: "/etc/nsswitch.conf", mode: 0o644, data: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
		{name: "/tmp", mode: 0o1777, dir: true},
		{name: "/var/lib/postgresql", mode: 0o755, uid: PostgresUID, gid: PostgresUID, dir: true},
		{name: PGData, mode: 0o700, uid: PostgresUID, gid: PostgresUID, dir: true},
		{name: PGSocketDir, mode: 0o2775, uid: PostgresUID, gid: PostgresUID, dir: true},
		{name: Entrypoint, mode: 0o755, data: []byte(entrypoint)},
	}
	for _, a := range busyboxApplets {
		base = append(base, file{name: "/bin/" + a, mode: 0o777, link: path.Base(Busybox)})
	}
	return [][]file{base, libs, pg}, nil
}

// elfStatic says whether an ELF binary needs no dynamic loader.
func elfStatic(b []byte) (bool, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// BuildPostgres makes the PostgreSQL image for this machine's platform
// from the server binaries in s.PGBinDir.
func BuildPostgres(s Spec) (v1.Image, error) {
	layers, err := postgresFiles(s.PGBinDir)
	if err != nil {
		return nil, err
	}
	return assemble(s, layers, v1.Config{
		User:         fmt.Sprintf("%d:%d", PostgresUID, PostgresUID),
		Env:          []string{"PATH=" + s.PGBinDir + ":/usr/local/bin:/bin", "PGDATA=" + PGData, "LANG=C"},
		Entrypoint:   []string{Entrypoint},
		Cmd:          []string{"postgres"},
		ExposedPorts: map[string]struct{}{"5432/tcp": {}},
		Volumes:      map[string]struct{}{PGData: {}},
		StopSignal:   "SIGINT",
		Labels:       map[string]string{LabelVersion: s.Version, LabelSource: s.Source, LabelTitle: string(Postgres)},
	})
}
