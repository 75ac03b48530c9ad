package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRegistrySettings(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(auth, []byte(`{"auths": {}}`), 0o600))
	t.Setenv(EnvDataDir, t.TempDir())
	t.Setenv(EnvInsecureRegistries, "127.0.0.1:5000, localhost:5000")
	t.Setenv(EnvAllowedRegistries, "registry.lan, 10.0.0.5:5000")
	t.Setenv(EnvRegistryDenyPrivate, "true")
	t.Setenv(EnvRegistryAuthFile, auth)
	t.Setenv(EnvRegistryAuth, `{"registry.lan": {"username": "ci", "password": "hunter2"}}`)
	c, err := Load("")
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1:5000", "localhost:5000"}, c.InsecureRegistries)
	require.Equal(t, []string{"registry.lan", "10.0.0.5:5000"}, c.AllowedRegistries)
	require.True(t, c.RegistryDenyPrivate)
	require.Equal(t, auth, c.RegistryAuthFile)
	require.Contains(t, c.RegistryAuth, "hunter2")

	t.Setenv(EnvRegistryDenyPrivate, "maybe")
	_, err = Load("")
	require.ErrorContains(t, err, EnvRegistryDenyPrivate)
	t.Setenv(EnvRegistryDenyPrivate, "")

	t.Setenv(EnvRegistryAuth, `{"registry.lan": hunter2`)
	_, err = Load("")
	require.ErrorContains(t, err, EnvRegistryAuth)
	require.NotContains(t, err.Error(), "hunter2", "a password never reaches an error")
	t.Setenv(EnvRegistryAuth, "")

	t.Setenv(EnvRegistryAuthFile, filepath.Join(t.TempDir(), "missing.json"))
	_, err = Load("")
	require.ErrorContains(t, err, EnvRegistryAuthFile)
	t.Setenv(EnvRegistryAuthFile, "")

	t.Setenv(EnvAllowedRegistries, "https://registry.lan/v2")
	_, err = Load("")
	require.ErrorContains(t, err, EnvAllowedRegistries)
	require.True(t, strings.Contains(err.Error(), "no scheme or path"))
}
