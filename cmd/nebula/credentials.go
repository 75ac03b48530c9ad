package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nebulactrl/nebulactrl/client"
)

// Environment variables that override the stored credentials.
const (
	envURL   = "NEBULACTRL_URL"
	envToken = "NEBULACTRL_TOKEN"
)

// errNoURL means no control plane was named anywhere.
var errNoURL = errors.New("no control plane given: run nebula login --url URL, or set " + envURL)

// credentials are what nebula login stores: one control plane and a token for it.
type credentials struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// credentialsPath is $(os.UserConfigDir)/nebulactrl/credentials.json.
func credentialsPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no configuration directory to keep the credentials in: %w", err)
	}
	return filepath.Join(dir, "nebulactrl", "credentials.json"), nil
}

// loadCredentials reads the stored credentials; none stored is the zero value.
func loadCredentials() (credentials, error) {
	p, err := credentialsPath()
	if err != nil {
		return credentials{}, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return credentials{}, nil
	}
	if err != nil {
		return credentials{}, err
	}
	var c credentials
	if err := json.Unmarshal(b, &c); err != nil {
		return credentials{}, fmt.Errorf("%s is damaged (%v): run nebula login again", p, err)
	}
	return c, nil
}

// saveCredentials writes the credentials readable by the user alone (file
// 0600 in a directory 0700), replacing the file in one rename so that a
// crash never leaves half a file.
func saveCredentials(c credentials) (string, error) {
	p, err := credentialsPath()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".credentials-*.json")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name()) // after the rename this removes nothing
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return p, os.Rename(f.Name(), p)
}

// removeCredentials forgets the stored credentials; it reports whether there were any.
func removeCredentials() (bool, error) {
	p, err := credentialsPath()
	if err != nil {
		return false, err
	}
	err = os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// effective returns the URL and token a command uses: --url over
// NEBULACTRL_URL over the stored URL, and NEBULACTRL_TOKEN over the stored
// token. The stored token is only ever sent to the URL it was stored for, so
// pointing a command at another control plane does not leak it there.
func effective(flagURL string) (url, token string, err error) {
	stored, err := loadCredentials()
	if err != nil {
		return "", "", err
	}
	url = firstNonEmpty(flagURL, os.Getenv(envURL), stored.URL)
	if url == "" {
		return "", "", errNoURL
	}
	if url, err = client.NormalizeURL(url); err != nil {
		return "", "", err
	}
	token = strings.TrimSpace(os.Getenv(envToken))
	if token == "" && stored.Token != "" {
		if storedURL, err := client.NormalizeURL(stored.URL); err == nil && storedURL == url {
			token = stored.Token
		}
	}
	return url, token, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}
