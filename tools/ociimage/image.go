package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user and group the images run as (distroless' "nonroot").
const NonRoot = 65532

// Labels of every image (OCI annotations keys, as image labels).
const (
	LabelVersion = "org.opencontainers.image.version"
	LabelSource  = "org.opencontainers.image.source"
	LabelTitle   = "org.opencontainers.image.title"
)

// Kind is which image is built.
type Kind string

// The two images.
const (
	// ControlPlane is nebula, answering as nebulactrl-server too, with
	// pg_dump and pg_restore for the control plane's backups.
	ControlPlane Kind = "nebulactrl"
	// Agent is nebulactrl-agent at /nebulactrl-agent, where the install
	// manifest's init container finds it to seed the pod volume: a symlink
	// to AgentRealBinary, in a directory of the non-root user's, so that an
	// agent run from the image in a container (docker run --restart=always)
	// can replace its binary in the container's writable layer when it
	// upgrades itself (it replaces the path os.Executable resolves to). Its
	// state directory, AgentStateDir, is the non-root user's too, so that a
	// volume mounted there starts writable.
	Agent Kind = "nebulactrl-agent"
)

// Spec describes one platform's image.
type Spec struct {
	Kind     Kind
	Platform v1.Platform
	// Binary is the static Linux binary of that platform.
	Binary  string
	Version string
	Source  string
	// CACerts is the CA bundle copied into the image.
	CACerts string
	// PGBinDir holds pg_dump and pg_restore to copy, with the shared
	// libraries ldd names (ControlPlane only; "" leaves them out).
	PGBinDir string
	// Created is the images' creation time and every file's time
	// (reproducible builds: SOURCE_DATE_EPOCH).
	Created time.Time
}

// Paths inside the images.
const (
	ServerBinary = "/usr/local/bin/nebula"
	ServerAlias  = "/usr/local/bin/nebulactrl-server"
	AgentBinary  = "/nebulactrl-agent"
	// AgentRealBinary is the agent's binary itself (AgentBinary links to it).
	AgentRealBinary = "/usr/local/lib/nebulactrl-agent/nebulactrl-agent"
	// AgentStateDir is the agent's default --state-dir.
	AgentStateDir = "/var/lib/nebulactrl-agent"
	DataDir       = "/var/lib/nebulactrl"
	CAFile        = "/etc/ssl/certs/ca-certificates.crt"
	Home          = "/home/nonroot"
)

// file is one entry of a layer.
type file struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
	dir      bool
	link     string // symlink target
}

// layer makes a reproducible layer of files, with their parent directories.
func layer(files []file, mtime time.Time) (v1.Layer, error) {
	seen := map[string]bool{}
	var all []file
	var addDirs func(p string)
	addDirs = func(p string) {
		d := path.Dir(p)
		if d == "/" || d == "." || seen[d] {
			return
		}
		addDirs(d)
		seen[d] = true
		all = append(all, file{name: d, mode: 0o755, dir: true})
	}
	for _, f := range files {
		addDirs(f.name)
		if f.dir {
			if seen[f.name] {
				// An explicit directory wins over an implied one.
				for i := range all {
					if all[i].name == f.name {
						all[i] = f
					}
				}
				continue
			}
			seen[f.name] = true
		}
		all = append(all, f)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range all {
		h := &tar.Header{Name: strings.TrimPrefix(f.name, "/"), Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// baseFiles are what a scratch image lacks: users, CA certificates, /tmp, a
// home and a data directory owned by the non-root user.
func baseFiles(s Spec) ([]file, error) {
	ca, err := os.ReadFile(s.CACerts)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificates: %w", err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", NonRoot, NonRoot, Home)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	files := []file{
		{name: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "/etc/group", mode: 0o644, data: []byte(group)},
		{name: CAFile, mode: 0o644, data: ca},
		{name: "/tmp", mode: 0o1777, dir: true},
		{name: Home, mode: 0o700, uid: NonRoot, gid: NonRoot, dir: true},
	}
	if s.Kind == ControlPlane {
		files = append(files, file{name: DataDir, mode: 0o700, uid: NonRoot, gid: NonRoot, dir: true})
	}
	return files, nil
}

// checkStatic refuses a binary that needs a dynamic loader, or of another
// architecture than the platform's.
func checkStatic(p string, platform v1.Platform) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading the binary: %w", err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s is not a Linux (ELF) binary: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is linked dynamically: build it with CGO_ENABLED=0", p)
		}
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[platform.Architecture]
	if want == 0 || f.Machine != want {
		return nil, fmt.Errorf("%s is built for %s, not %s", p, f.Machine, platform.Architecture)
	}
	return b, nil
}

var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)`)

// pgFiles copies pg_dump and pg_restore and every shared library ldd lists
// for them (the dynamic loader too) to the same paths in the image.
func pgFiles(binDir string) ([]file, error) {
	var files []file
	libs := map[string]bool{}
	for _, tool := range []string{"pg_dump", "pg_restore"} {
		p := filepath.Join(binDir, tool)
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		files = append(files, file{name: p, mode: 0o755, data: b})
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", p, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if strings.Contains(sc.Text(), "not found") {
				return nil, fmt.Errorf("ldd %s: %s", p, strings.TrimSpace(sc.Text()))
			}
			if m := lddLine.FindStringSubmatch(sc.Text()); m != nil {
				libs[m[1]] = true
			}
		}
	}
	names := make([]string, 0, len(libs))
	for l := range libs {
		names = append(names, l)
	}
	sort.Strings(names)
	for _, l := range names {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", l, err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", real, err)
		}
		files = append(files, file{name: l, mode: 0o755, data: b})
	}
	if len(names) == 0 {
		return nil, errors.New("ldd listed no libraries for pg_dump: not a dynamically linked PostgreSQL build?")
	}
	return files, nil
}

// Build makes one platform's image.
func Build(s Spec) (v1.Image, error) {
	bin, err := checkStatic(s.Binary, s.Platform)
	if err != nil {
		return nil, err
	}
	base, err := baseFiles(s)
	if err != nil {
		return nil, err
	}
	var layers [][]file
	layers = append(layers, base)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CAFile, "HOME=" + Home}
	cfg := v1.Config{
		User:   fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		Labels: map[string]string{LabelVersion: s.Version, LabelSource: s.Source, LabelTitle: string(s.Kind)},
	}
	switch s.Kind {
	case ControlPlane:
		if s.PGBinDir != "" {
			pg, err := pgFiles(s.PGBinDir)
			if err != nil {
				return nil, err
			}
			layers = append(layers, pg)
			env[0] = "PATH=/usr/local/bin:" + s.PGBinDir + ":/usr/bin:/bin"
		}
		layers = append(layers, []file{
			{name: ServerBinary, mode: 0o755, data: bin},
			{name: ServerAlias, link: path.Base(ServerBinary), mode: 0o777},
		})
		env = append(env, "NEBULACTRL_DATA_DIR="+DataDir, "NEBULACTRL_LISTEN=0.0.0.0:8080")
		cfg.Entrypoint = []string{ServerAlias}
		cfg.Cmd = []string{"serve"}
		cfg.WorkingDir = DataDir
		cfg.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	case Agent:
		layers = append(layers, []file{
			{name: path.Dir(AgentRealBinary), mode: 0o755, uid: NonRoot, gid: NonRoot, dir: true},
			{name: AgentRealBinary, mode: 0o755, uid: NonRoot, gid: NonRoot, data: bin},
			{name: AgentBinary, link: strings.TrimPrefix(AgentRealBinary, "/"), mode: 0o777},
			{name: AgentStateDir, mode: 0o700, uid: NonRoot, gid: NonRoot, dir: true},
		})
		cfg.Entrypoint = []string{AgentBinary}
	default:
		return nil, fmt.Errorf("unknown image %q", s.Kind)
	}
	cfg.Env = env
	img, err := assemble(s, layers, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, map[string]string{LabelVersion: s.Version, LabelSource: s.Source}).(v1.Image), nil
}

// assemble makes an OCI image of the layers (each a set of files) with the
// configuration cfg, for s's platform and creation time.
func assemble(s Spec, layers [][]file, cfg v1.Config) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, files := range layers {
		l, err := layer(files, s.Created)
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture, cf.Variant = s.Platform.OS, s.Platform.Architecture, s.Platform.Variant
	cf.Created = v1.Time{Time: s.Created}
	return mutate.ConfigFile(img, cf)
}

// BuildIndex makes an image index of one image per platform.
func BuildIndex(specs []Spec) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, s := range specs {
		build := Build
		if s.Kind == Postgres {
			build = BuildPostgres
		}
		img, err := build(s)
		if err != nil {
			return nil, fmt.Errorf("%s for %s: %w", s.Kind, s.Platform.String(), err)
		}
		p := s.Platform
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	if len(specs) > 0 {
		idx = mutate.Annotations(idx, map[string]string{LabelVersion: specs[0].Version, LabelSource: specs[0].Source}).(v1.ImageIndex)
	}
	return idx, nil
}
