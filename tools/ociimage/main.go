// Command ociimage builds the OCI images of the control plane (nebulactrl)
// and the agent (nebulactrl-agent) without a Docker daemon or a base image:
// each is a few layers written here (users with the non-root user 65532, the
// build machine's CA certificates, the static binary; for the control plane
// also pg_dump and pg_restore with their libraries, for its backups) on
// go-containerregistry's empty image, labelled with the version and the
// source. It is a build tool of this repository, run by `go tool task
// images`, not a user-facing binary:
//
//	go run ./tools/ociimage -kind nebulactrl -version 1.5.0 \
//	    -binary linux/amd64=dist/images/nebula-linux-amd64 \
//	    -oci-layout dist/images/nebulactrl [-push registry.example.com/nebulactrl:1.5.0]
//
// An OCI layout it writes also holds a docker manifest.json naming the
// images of this machine's architecture (-docker-repo:<version>, one per
// version in the layout), so that Docker 20.10's `docker load`, which needs
// that file, loads it: tar -C dist/images/nebulactrl -c . | docker load.
//
// -kind postgres makes a PostgreSQL server image of this machine's Debian
// packages for the packaged install's tests (no -binary; see Postgres).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/nebulactrl/nebulactrl/internal/backup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

type binaries []string

func (b *binaries) String() string     { return strings.Join(*b, ",") }
func (b *binaries) Set(v string) error { *b = append(*b, strings.Split(v, ",")...); return nil }

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	kind := fs.String("kind", "", "nebulactrl (the control plane), nebulactrl-agent, or postgres (a PostgreSQL server of this machine's packages, for tests)")
	version := fs.String("version", "", "the version the binaries report, for the label and the tag")
	source := fs.String("source", "https://github.com/nebulactrl/nebulactrl", "the source repository, for the label")
	ca := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle copied into the image")
	pg := fs.String("pg-bin-dir", "", `pg_dump and pg_restore for the control plane's backups (default: found on this machine; "none" leaves them out)`)
	push := fs.String("push", "", "push the image index to this reference (registry/repository:tag)")
	insecure := fs.Bool("insecure", false, "reach the registry over plain HTTP (a local test registry)")
	ociLayout := fs.String("oci-layout", "", "write the image index into this OCI layout directory (with a docker manifest.json for docker load)")
	dockerRepo := fs.String("docker-repo", "", "the repository the layout's manifest.json tags its images with (default ghcr.io/nebulactrl/KIND)")
	var bins binaries
	fs.Var(&bins, "binary", "OS/ARCH=PATH of a static binary, once per platform (linux/amd64=bin/nebula)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	k := Kind(*kind)
	if k != ControlPlane && k != Agent && k != Postgres {
		errs = append(errs, fmt.Errorf("-kind %q: want %s, %s or %s", *kind, ControlPlane, Agent, Postgres))
	}
	if *version == "" {
		errs = append(errs, errors.New("-version is required"))
	}
	if len(bins) == 0 && k != Postgres {
		errs = append(errs, errors.New("-binary is required (OS/ARCH=PATH)"))
	}
	if len(bins) != 0 && k == Postgres {
		errs = append(errs, errors.New("-kind postgres takes no -binary: it is made of this machine's PostgreSQL"))
	}
	if *push == "" && *ociLayout == "" {
		errs = append(errs, errors.New("give -push or -oci-layout (or both)"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	created := time.Unix(0, 0).UTC()
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", v, err)
		}
		created = time.Unix(n, 0).UTC()
	}
	var specs []Spec
	if k == Postgres {
		s := Spec{Kind: k, Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, Version: *version, Source: *source, Created: created, PGBinDir: *pg}
		if s.PGBinDir == "" || s.PGBinDir == "none" {
			var err error
			if s.PGBinDir, err = backup.FindBinDir(); err != nil {
				return err
			}
		}
		specs = append(specs, s)
	}
	for _, b := range bins {
		plat, p, ok := strings.Cut(b, "=")
		if !ok {
			return fmt.Errorf("-binary %q: want OS/ARCH=PATH", b)
		}
		platform, err := v1.ParsePlatform(plat)
		if err != nil || platform.OS != "linux" {
			return fmt.Errorf("-binary %q: want linux/amd64 or linux/arm64", b)
		}
		s := Spec{Kind: k, Platform: *platform, Binary: p, Version: *version, Source: *source, CACerts: *ca, Created: created}
		if k == ControlPlane && *pg != "none" {
			if platform.Architecture != runtime.GOARCH {
				return fmt.Errorf("no pg_dump for %s on this %s machine: build the control plane image for %s, or give -pg-bin-dir none (its backups then fail)", plat, runtime.GOARCH, runtime.GOARCH)
			}
			s.PGBinDir = *pg
			if s.PGBinDir == "" {
				if s.PGBinDir, err = backup.FindBinDir(); err != nil {
					return err
				}
			}
		}
		specs = append(specs, s)
	}
	idx, err := BuildIndex(specs)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if *ociLayout != "" {
		p, err := layout.FromPath(*ociLayout)
		if err != nil {
			if p, err = layout.Write(*ociLayout, empty.Index); err != nil {
				return fmt.Errorf("creating the OCI layout %s: %w", *ociLayout, err)
			}
		}
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": *version})); err != nil {
			return fmt.Errorf("writing the OCI layout %s: %w", *ociLayout, err)
		}
		repo := *dockerRepo
		if repo == "" {
			repo = "ghcr.io/nebulactrl/" + string(k)
		}
		if err := WriteDockerManifest(p, repo, runtime.GOARCH); err != nil {
			return fmt.Errorf("writing the docker manifest.json of %s: %w", *ociLayout, err)
		}
		fmt.Fprintf(out, "%s %s written to %s (%s)\n", k, *version, *ociLayout, digest)
	}
	if *push != "" {
		var opts []name.Option
		if *insecure {
			opts = append(opts, name.Insecure)
		}
		ref, err := name.ParseReference(*push, opts...)
		if err != nil {
			return fmt.Errorf("-push %q: %w", *push, err)
		}
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
		fmt.Fprintf(out, "%s %s pushed to %s@%s\n", k, *version, ref, digest)
	}
	return nil
}
