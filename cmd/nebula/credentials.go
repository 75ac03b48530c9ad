package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
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

// credentials are what nebula login stores for one control plane: its URL
// and a token for it.
type credentials struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// envContext names the stored control plane to use, as --context does.
const envContext = "NEBULACTRL_CONTEXT"

// contextsFile is the credentials file: named contexts, one control plane
// and its token each, and the one in use. Files of the older format (one
// url and token) are read as a single context named after the host, and
// written back in this format.
type contextsFile struct {
	Current  string                 `json:"current,omitempty"`
	Contexts map[string]credentials `json:"contexts"`
}

// credentialsPath is $(os.UserConfigDir)/nebulactrl/credentials.json.
func credentialsPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no configuration directory to keep the credentials in: %w", err)
	}
	return filepath.Join(dir, "nebulactrl", "credentials.json"), nil
}

// contextName derives a context's name from a control plane's URL: its
// host (and port), such as nebula.example.com or 127.0.0.1:8080.
func contextName(rawURL string) string {
	u, err := neturl.Parse(strings.TrimSpace(rawURL))
	if err != nil || u.Host == "" {
		return "default"
	}
	return u.Host
}

// validContextName checks a name given for a context.
func validContextName(name string) error {
	if name == "" || len(name) > 100 || strings.TrimSpace(name) != name || strings.ContainsAny(name, "/\\\t\n\r") {
		return usagef("%q is not a context name: want 1-100 characters without slashes, spaces around or line breaks", name)
	}
	return nil
}

// loadContexts reads the stored contexts; none stored is an empty file.
// A file of the older single-login format is migrated (and rewritten).
func loadContexts() (contextsFile, error) {
	empty := contextsFile{Contexts: map[string]credentials{}}
	p, err := credentialsPath()
	if err != nil {
		return empty, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, err
	}
	var probe struct {
		contextsFile
		credentials
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return empty, fmt.Errorf("%s is damaged (%v): run nebula login again", p, err)
	}
	cf := probe.contextsFile
	if cf.Contexts == nil {
		cf.Contexts = map[string]credentials{}
	}
	if len(cf.Contexts) == 0 && probe.URL != "" {
		// The older format: one control plane. Keep it as a context.
		name := contextName(probe.URL)
		cf.Contexts[name] = probe.credentials
		cf.Current = name
		_, _ = saveContexts(cf) // migrated on disk too; reading it works either way
	}
	return cf, nil
}

// currentCredentials returns the current context's credentials (zero when none).
func currentCredentials() (credentials, error) {
	cf, err := loadContexts()
	if err != nil {
		return credentials{}, err
	}
	return cf.Contexts[cf.Current], nil
}

// saveCredentials stores c as the context name (replacing what it held)
// and makes it the current one.
func saveCredentials(name string, c credentials) (string, error) {
	cf, err := loadContexts()
	if err != nil {
		return "", err
	}
	cf.Contexts[name] = c
	cf.Current = name
	return saveContexts(cf)
}

// saveContexts writes the credentials file readable by the user alone (file
// 0600 in a directory 0700), replacing the file in one rename so that a
// crash never leaves half a file.
func saveContexts(c contextsFile) (string, error) {
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

// removeContext forgets a stored context; it reports whether there was one.
func removeContext(name string) (bool, error) {
	cf, err := loadContexts()
	if err != nil {
		return false, err
	}
	if _, ok := cf.Contexts[name]; !ok {
		return false, nil
	}
	delete(cf.Contexts, name)
	if cf.Current == name {
		cf.Current = ""
	}
	_, err = saveContexts(cf)
	return err == nil, err
}

// effective returns the URL and token a command uses, and the name of the
// stored context they come from ("" when none). The URL is --url, else the
// one of --context, else NEBULACTRL_URL, else the one of NEBULACTRL_CONTEXT
// or of the current context. The token is NEBULACTRL_TOKEN, else the token
// stored for that URL: a stored token is only ever sent to the URL it was
// stored for, so pointing a command at another control plane does not leak
// it there.
func effective(flagURL, flagContext string) (url, token, name string, err error) {
	cf, err := loadContexts()
	if err != nil {
		return "", "", "", err
	}
	named := func(n string) (credentials, error) {
		c, ok := cf.Contexts[n]
		if !ok {
			return credentials{}, exitError{exitNotFound, fmt.Errorf("no context %q is stored (nebula context list)", n)}
		}
		return c, nil
	}
	var stored credentials
	name = strings.TrimSpace(flagContext)
	switch {
	case name != "":
		if stored, err = named(name); err != nil {
			return "", "", "", err
		}
		url = firstNonEmpty(flagURL, stored.URL)
	default:
		if n := strings.TrimSpace(os.Getenv(envContext)); n != "" {
			if stored, err = named(n); err != nil {
				return "", "", "", err
			}
			name = n
		} else if cf.Current != "" {
			stored, name = cf.Contexts[cf.Current], cf.Current
		}
		url = firstNonEmpty(flagURL, os.Getenv(envURL), stored.URL)
	}
	if url == "" {
		return "", "", "", errNoURL
	}
	if url, err = client.NormalizeURL(url); err != nil {
		return "", "", "", err
	}
	if storedURL, err := client.NormalizeURL(stored.URL); err != nil || storedURL != url {
		// Another control plane than the context's: the context that was
		// stored for it, if any.
		stored, name = credentials{}, ""
		for n, c := range cf.Contexts {
			if u, err := client.NormalizeURL(c.URL); err == nil && u == url && (name == "" || n < name) {
				stored, name = c, n
			}
		}
	}
	token = strings.TrimSpace(os.Getenv(envToken))
	if token == "" {
		token = stored.Token
	}
	return url, token, name, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}
