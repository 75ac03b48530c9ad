package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	dockerconfig "github.com/docker/cli/cli/config"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// Registry credentials, in the order they are asked:
//
//  1. Config.Auth: credentials by registry host, from NEBULACTRL_REGISTRY_AUTH
//     (ParseAuth), for CI and container platforms that hand secrets over as
//     environment variables;
//  2. Config.AuthFile: a Docker config file (NEBULACTRL_REGISTRY_AUTH_FILE),
//     its "auths" entries and credential helpers, as `docker login` writes it;
//     or, without one, the Docker config of the user running the control
//     plane ($DOCKER_CONFIG/config.json or ~/.docker/config.json).
//
// A registry with no credentials is asked anonymously.

// normalizeRegistry maps the ways a registry is written in Docker configs
// ("https://index.docker.io/v1/", "docker.io", "Registry.Example.com:5000")
// to the form of name.Registry.RegistryStr.
func normalizeRegistry(key string) string {
	k := strings.ToLower(strings.TrimSpace(key))
	k = strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")
	if i := strings.IndexByte(k, '/'); i >= 0 {
		k = k[:i]
	}
	switch k {
	case "docker.io", "registry-1.docker.io", "index.docker.io":
		return name.DefaultRegistry
	}
	return k
}

type staticKeychain map[string]authn.AuthConfig

func (s staticKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	if c, ok := s[normalizeRegistry(target.RegistryStr())]; ok {
		return authn.FromConfig(c), nil
	}
	return authn.Anonymous, nil
}

// ParseAuth reads registry credentials given as JSON: an object from registry
// host ("registry.example.com" or "host:port") to an object with "username"
// and "password" (or "auth", base64 of "username:password", or
// "identitytoken"), such as
//
//	{"registry.example.com": {"username": "ci", "password": "..."}}
//
// A whole Docker config ({"auths": {...}}) is read the same way. An empty
// string is no credentials. Errors never quote the input: it holds secrets.
func ParseAuth(s string) (map[string]authn.AuthConfig, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	type entry struct {
		Username      string `json:"username"`
		Password      string `json:"password"`
		Auth          string `json:"auth"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, errors.New(`not a JSON object; want {"registry.example.com": {"username": "...", "password": "..."}}`)
	}
	if auths, ok := raw["auths"]; ok {
		raw = nil
		if err := json.Unmarshal(auths, &raw); err != nil {
			return nil, errors.New(`"auths" is not an object of registries`)
		}
	}
	out := make(map[string]authn.AuthConfig, len(raw))
	hosts := make([]string, 0, len(raw))
	for h := range raw {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		var e entry
		dec := json.NewDecoder(bytes.NewReader(raw[h]))
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("registry %q: not an object with username and password", h)
		}
		key := normalizeRegistry(h)
		if key == "" {
			return nil, errors.New("a registry name is empty")
		}
		if e.Username == "" && e.Password == "" && e.Auth == "" && e.IdentityToken == "" && e.RegistryToken == "" {
			return nil, fmt.Errorf("registry %q: no username/password, auth or identitytoken", h)
		}
		if (e.Username == "") != (e.Password == "") {
			return nil, fmt.Errorf("registry %q: username and password go together", h)
		}
		out[key] = authn.AuthConfig{Username: e.Username, Password: e.Password, Auth: e.Auth,
			IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
	}
	return out, nil
}

// authFileError is a credentials file that could not be used. It says what
// went wrong without quoting the file.
type authFileError struct {
	path, what string
	err        error
}

func (e *authFileError) Error() string {
	return fmt.Sprintf("registry credentials file %s: %s", e.path, e.what)
}
func (e *authFileError) Unwrap() error { return e.err }

// fileKeychain reads a Docker config file at every lookup, like
// authn.DefaultKeychain does for the user's own.
type fileKeychain string

func (f fileKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	path := string(f)
	file, err := os.Open(path)
	if err != nil {
		what := "cannot be opened"
		if errors.Is(err, os.ErrNotExist) {
			what = "does not exist"
		} else if errors.Is(err, os.ErrPermission) {
			what = "is not readable by the control plane"
		}
		return nil, &authFileError{path: path, what: what, err: err}
	}
	defer file.Close()
	cf, err := dockerconfig.LoadFromReader(file)
	if err != nil {
		return nil, &authFileError{path: path, what: "is not a Docker config file (JSON with \"auths\")", err: errors.New("parse error")}
	}
	cf.Filename = path
	for _, key := range []string{target.String(), target.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		c, err := cf.GetAuthConfig(key)
		if err != nil {
			return nil, &authFileError{path: path, what: "its credential helper failed", err: errors.New("credential helper failed")}
		}
		if c.Username != "" || c.Password != "" || c.Auth != "" || c.IdentityToken != "" || c.RegistryToken != "" {
			return authn.FromConfig(authn.AuthConfig{Username: c.Username, Password: c.Password, Auth: c.Auth,
				IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken}), nil
		}
	}
	return authn.Anonymous, nil
}
