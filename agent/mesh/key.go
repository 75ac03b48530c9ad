// Package mesh is the node agent of the WireGuard mesh (nebulactrl-agent
// mesh): it runs on every node, keeps the node's private key on the node,
// publishes the public key and the node's candidate endpoints through the
// Kubernetes API, and configures the node's interface (nebula0) with wgctrl
// from the peers its cluster's agent hands it: kernel WireGuard when the
// module exists, else userspace wireguard-go in this process.
package mesh

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// keyFile is the private key's file in the key directory.
const keyFile = "private.key"

// LoadOrCreateKey returns the node's private key from dir, making one (and
// dir, mode 0700) when there is none. The file is mode 0600 and written
// whole or not at all: a crash never leaves half a key. A file of another
// mode, or that does not hold a key, is an error rather than replaced: the
// node's identity is not thrown away silently.
func LoadOrCreateKey(dir string) (wgtypes.Key, error) {
	path := filepath.Join(dir, keyFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		fi, err := os.Stat(path)
		if err != nil {
			return wgtypes.Key{}, err
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return wgtypes.Key{}, fmt.Errorf("mesh: %s is readable by others (mode %v): chmod 600 it", path, fi.Mode().Perm())
		}
		k, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
		if err != nil {
			return wgtypes.Key{}, fmt.Errorf("mesh: %s does not hold a WireGuard private key: %w", path, err)
		}
		return k, nil
	case !errors.Is(err, fs.ErrNotExist):
		return wgtypes.Key{}, fmt.Errorf("mesh: reading the private key: %w", err)
	}
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("mesh: generating a private key: %w", err)
	}
	return k, SaveKey(dir, k)
}

// SaveKey writes k as the node's private key, atomically, mode 0600.
func SaveKey(dir string, k wgtypes.Key) error { return writeKey(dir, keyFile, k) }

func writeKey(dir, name string, k wgtypes.Key) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("mesh: creating the key directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".private.key-*")
	if err != nil {
		return fmt.Errorf("mesh: writing the private key: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(k.String() + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("mesh: writing the private key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}

// nextKeyFile keeps the key a rotation switches to, until it does.
const nextKeyFile = "next.key"

// loadNextKey returns the staged next key; false when there is none.
func loadNextKey(dir string) (wgtypes.Key, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, nextKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return wgtypes.Key{}, false, nil
	}
	if err != nil {
		return wgtypes.Key{}, false, fmt.Errorf("mesh: reading the next key: %w", err)
	}
	k, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return wgtypes.Key{}, false, fmt.Errorf("mesh: %s does not hold a WireGuard private key: %w", filepath.Join(dir, nextKeyFile), err)
	}
	return k, true, nil
}

// stageNextKey makes and keeps the key a rotation switches to.
func stageNextKey(dir string) (wgtypes.Key, error) {
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("mesh: generating the next key: %w", err)
	}
	return k, writeKey(dir, nextKeyFile, k)
}

// promoteNextKey makes the staged key the node's key: one rename, so a
// crash leaves either key whole.
func promoteNextKey(dir string) error {
	return os.Rename(filepath.Join(dir, nextKeyFile), filepath.Join(dir, keyFile))
}
