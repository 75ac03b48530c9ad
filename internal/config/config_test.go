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

func TestLogAndMetricsSettings(t *testing.T) {
	t.Setenv(EnvDataDir, t.TempDir())
	c, err := Load("")
	require.NoError(t, err)
	require.Equal(t, "text", c.LogFormat, "text by default")
	require.Empty(t, c.MetricsListen, "no metrics listener by default")

	t.Setenv(EnvLogFormat, "json")
	t.Setenv(EnvMetricsListen, "127.0.0.1:9100")
	c, err = Load("")
	require.NoError(t, err)
	require.Equal(t, "json", c.LogFormat)
	require.Equal(t, "127.0.0.1:9100", c.MetricsListen)

	t.Setenv(EnvLogFormat, "logfmt")
	_, err = Load("")
	require.ErrorContains(t, err, EnvLogFormat)
	t.Setenv(EnvLogFormat, "")

	t.Setenv(EnvMetricsListen, "9100")
	_, err = Load("")
	require.ErrorContains(t, err, EnvMetricsListen+` "9100" is not host:port`)

	t.Setenv(EnvMetricsListen, "127.0.0.1:8080")
	t.Setenv(EnvListen, "127.0.0.1:8080")
	_, err = Load("")
	require.ErrorContains(t, err, "same address")
}

// Both master keys of a rotation come from the .env file (the Docker
// install keeps them there) or the environment, which wins.
func TestPreviousSecretKey(t *testing.T) {
	t.Setenv(EnvDataDir, t.TempDir())
	env := filepath.Join(t.TempDir(), ".env")
	require.NoError(t, os.WriteFile(env, []byte("NEBULACTRL_SECRET_KEY=new\nNEBULACTRL_PREVIOUS_SECRET_KEY=old\n"), 0o600))
	c, err := Load(env)
	require.NoError(t, err)
	require.Equal(t, "new", c.SecretKey)
	require.Equal(t, "old", c.PreviousSecretKey)
	t.Setenv(EnvPreviousSecretKey, " other \n")
	c, err = Load(env)
	require.NoError(t, err)
	require.Equal(t, "other", c.PreviousSecretKey)
}
