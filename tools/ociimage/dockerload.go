package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// DockerManifestEntry is one image of docker save's manifest.json.
type DockerManifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// WriteDockerManifest writes manifest.json into the OCI layout: for each
// image index of the layout (one per version, named by its
// org.opencontainers.image.ref.name), its image for linux/arch tagged
// repo:<version>, the config and layers pointing at the layout's blobs.
// Docker 20.10 loads an OCI layout only with this file (newer docker save
// writes both). A version appended again replaces its entry.
func WriteDockerManifest(p layout.Path, repo, arch string) error {
	root, err := p.ImageIndex()
	if err != nil {
		return err
	}
	im, err := root.IndexManifest()
	if err != nil {
		return err
	}
	var entries []DockerManifestEntry
	at := map[string]int{}
	for _, d := range im.Manifests {
		tag := d.Annotations["org.opencontainers.image.ref.name"]
		if tag == "" {
			continue
		}
		var img v1.Image
		switch {
		case d.MediaType.IsIndex():
			idx, err := root.ImageIndex(d.Digest)
			if err != nil {
				return err
			}
			m, err := idx.IndexManifest()
			if err != nil {
				return err
			}
			for _, c := range m.Manifests {
				if c.Platform != nil && c.Platform.OS == "linux" && c.Platform.Architecture == arch {
					if img, err = idx.Image(c.Digest); err != nil {
						return err
					}
					break
				}
			}
		case d.MediaType.IsImage():
			if img, err = root.Image(d.Digest); err != nil {
				return err
			}
		}
		if img == nil {
			continue // no image of this architecture
		}
		cfg, err := img.ConfigName()
		if err != nil {
			return err
		}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		e := DockerManifestEntry{Config: blobPath(cfg), RepoTags: []string{repo + ":" + tag}}
		for _, l := range layers {
			h, err := l.Digest()
			if err != nil {
				return err
			}
			e.Layers = append(e.Layers, blobPath(h))
		}
		if i, ok := at[tag]; ok {
			entries[i] = e
			continue
		}
		at[tag] = len(entries)
		entries = append(entries, e)
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	tmp := filepath.Join(string(p), "manifest.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(string(p), "manifest.json")); err != nil {
		return fmt.Errorf("writing manifest.json: %w", err)
	}
	return nil
}
