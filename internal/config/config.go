// Package config reads the control plane's configuration: NEBULACTRL_*
// variables from the environment, and from a .env file for what the
// environment does not set.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/joho/godotenv"
)

// Names of the variables.
const (
	EnvDatabaseURL = "NEBULACTRL_DATABASE_URL"
	EnvSecretKey   = "NEBULACTRL_SECRET_KEY"
	// EnvPreviousSecretKey is the master key being rotated away (base64 of
	// 32 bytes): the control plane opens what it wrapped until nebula
	// secret-key rotate has re-wrapped everything under NEBULACTRL_SECRET_KEY
	// (docs/operations.md, "Rotating the master key"). Unset otherwise.
	EnvPreviousSecretKey = "NEBULACTRL_PREVIOUS_SECRET_KEY"
	EnvPublicURL         = "NEBULACTRL_PUBLIC_URL"
	EnvListen            = "NEBULACTRL_LISTEN"
	EnvDataDir           = "NEBULACTRL_DATA_DIR"
	EnvLogLevel          = "NEBULACTRL_LOG_LEVEL"
	// EnvLogFormat is text (default, for a terminal) or json (one JSON
	// object a line, for a log collector).
	EnvLogFormat = "NEBULACTRL_LOG_FORMAT"
	// EnvMetricsListen, when set, serves /metrics on its own address
	// (host:port) without authentication, and no longer on the public
	// listener.
	EnvMetricsListen = "NEBULACTRL_METRICS_LISTEN"
	EnvTLSCert       = "NEBULACTRL_TLS_CERT"
	EnvTLSKey        = "NEBULACTRL_TLS_KEY"
	// EnvInsecureRegistries lists registries (host:port, comma-separated)
	// reached over plain HTTP: development registries on loopback only.
	EnvInsecureRegistries = "NEBULACTRL_INSECURE_REGISTRIES"
	// EnvAllowedRegistries lists registries ("host" or "host:port",
	// comma-separated) that image resolution may reach on loopback,
	// link-local or other addresses it refuses otherwise.
	EnvAllowedRegistries = "NEBULACTRL_ALLOWED_REGISTRIES"
	// EnvRegistryDenyPrivate (true/false, default false) makes image
	// resolution refuse private addresses (10/8, 172.16/12, 192.168/16,
	// fc00::/7, 100.64/10) too, unless the registry is listed.
	EnvRegistryDenyPrivate = "NEBULACTRL_REGISTRY_DENY_PRIVATE"
	// EnvRegistryAuthFile is a Docker config file with registry credentials
	// (default: the Docker config of the user running the control plane).
	EnvRegistryAuthFile = "NEBULACTRL_REGISTRY_AUTH_FILE"
	// EnvRegistryAuth holds registry credentials as JSON,
	// {"host": {"username": "...", "password": "..."}}, asked first.
	EnvRegistryAuth = "NEBULACTRL_REGISTRY_AUTH"
	// EnvApprovalTTL is how long a change set waits for a decision before it
	// expires (a Go duration, default 72h).
	EnvApprovalTTL = "NEBULACTRL_APPROVAL_TTL"
	// EnvStallTimeout flags a deployment whose stages did not move for this
	// long (a Go duration, default 10m).
	EnvStallTimeout = "NEBULACTRL_STALL_TIMEOUT"
	// EnvAgentUpgradeTimeout is how long an agent asked to upgrade has to
	// connect again with the new version before the upgrade counts as
	// failed (a Go duration, default 10m).
	EnvAgentUpgradeTimeout = "NEBULACTRL_AGENT_UPGRADE_TIMEOUT"
	// EnvWebhookAllowedHosts lists outbound webhook receivers ("host:port",
	// comma-separated) that deliveries may reach on loopback, link-local
	// or other addresses refused otherwise (a local test receiver).
	EnvWebhookAllowedHosts = "NEBULACTRL_WEBHOOK_ALLOWED_HOSTS"
	// EnvWebhookDenyPrivate (true/false, default false) makes outbound
	// webhook deliveries refuse private addresses too, unless listed.
	EnvWebhookDenyPrivate = "NEBULACTRL_WEBHOOK_DENY_PRIVATE"
)

// Names lists every variable the control plane reads, for documentation
// checks.
var Names = []string{EnvDatabaseURL, EnvSecretKey, EnvPreviousSecretKey, EnvPublicURL, EnvListen, EnvDataDir, EnvLogLevel, EnvLogFormat,
	EnvMetricsListen, EnvTLSCert, EnvTLSKey, EnvInsecureRegistries, EnvAllowedRegistries, EnvRegistryDenyPrivate,
	EnvRegistryAuthFile, EnvRegistryAuth, EnvApprovalTTL, EnvStallTimeout, EnvAgentUpgradeTimeout, EnvWebhookAllowedHosts, EnvWebhookDenyPrivate}

// Config is the control plane's configuration.
type Config struct {
	// DatabaseURL is a PostgreSQL URL; empty runs the managed local
	// PostgreSQL in DataDir (the embedded default).
	DatabaseURL string
	// SecretKey is the master key that seals secrets (base64 of 32 bytes).
	SecretKey string
	// PreviousSecretKey is the master key being rotated away, or "".
	PreviousSecretKey string
	// PublicURL is where agents and browsers reach the control plane.
	PublicURL string
	// Listen is the HTTP listen address.
	Listen string
	// DataDir holds the managed PostgreSQL and other local state.
	DataDir string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
	// MetricsListen is the address of the metrics listener; empty serves
	// /metrics on the public listener, to instance administrators only.
	MetricsListen string
	// TLSCert and TLSKey make the control plane serve TLS itself.
	TLSCert, TLSKey string
	// InsecureRegistries are reached over plain HTTP.
	InsecureRegistries []string
	// AllowedRegistries, RegistryDenyPrivate, RegistryAuthFile and
	// RegistryAuth: see the variables of the same names.
	AllowedRegistries   []string
	RegistryDenyPrivate bool
	RegistryAuthFile    string
	RegistryAuth        string
	// ApprovalTTL and StallTimeout: see EnvApprovalTTL and EnvStallTimeout.
	ApprovalTTL, StallTimeout time.Duration
	// AgentUpgradeTimeout: see EnvAgentUpgradeTimeout.
	AgentUpgradeTimeout time.Duration
	// WebhookAllowedHosts and WebhookDenyPrivate: see the variables of the
	// same names.
	WebhookAllowedHosts []string
	WebhookDenyPrivate  bool
	// EnvFile is the .env file that was read (or would be written).
	EnvFile string
}

// DefaultDataDir is where local state lives without NEBULACTRL_DATA_DIR:
// /var/lib/nebulactrl for root (PostgreSQL runs as an unprivileged user and
// must reach it), the user's data directory otherwise.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/nebulactrl"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "nebulactrl")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "nebulactrl")
	}
	return "nebulactrl-data"
}

// Load reads envFile (if it exists) and the environment; the environment wins.
func Load(envFile string) (Config, error) {
	file := map[string]string{}
	if envFile != "" {
		m, err := godotenv.Read(envFile)
		switch {
		case err == nil:
			file = m
		case errors.Is(err, os.ErrNotExist):
		default:
			return Config{}, fmt.Errorf("reading %s: %w", envFile, err)
		}
	}
	get := func(k string) string {
		if v, ok := os.LookupEnv(k); ok {
			return strings.TrimSpace(v)
		}
		return strings.TrimSpace(file[k])
	}
	c := Config{
		DatabaseURL:       get(EnvDatabaseURL),
		SecretKey:         get(EnvSecretKey),
		PreviousSecretKey: get(EnvPreviousSecretKey),
		PublicURL:         get(EnvPublicURL),
		Listen:            get(EnvListen),
		DataDir:           get(EnvDataDir),
		LogLevel:          get(EnvLogLevel),
		LogFormat:         get(EnvLogFormat),
		MetricsListen:     get(EnvMetricsListen),
		TLSCert:           get(EnvTLSCert),
		TLSKey:            get(EnvTLSKey),
		EnvFile:           envFile,
	}
	for _, list := range []struct {
		env string
		to  *[]string
	}{{EnvInsecureRegistries, &c.InsecureRegistries}, {EnvAllowedRegistries, &c.AllowedRegistries}, {EnvWebhookAllowedHosts, &c.WebhookAllowedHosts}} {
		for _, r := range strings.Split(get(list.env), ",") {
			if r = strings.TrimSpace(r); r != "" {
				*list.to = append(*list.to, r)
			}
		}
	}
	c.RegistryAuthFile = get(EnvRegistryAuthFile)
	c.RegistryAuth = get(EnvRegistryAuth)
	if v := get(EnvRegistryDenyPrivate); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("%s=%q: want true or false", EnvRegistryDenyPrivate, v)
		}
		c.RegistryDenyPrivate = b
	}
	if v := get(EnvWebhookDenyPrivate); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("%s=%q: want true or false", EnvWebhookDenyPrivate, v)
		}
		c.WebhookDenyPrivate = b
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
		def time.Duration
	}{{EnvApprovalTTL, &c.ApprovalTTL, 72 * time.Hour}, {EnvStallTimeout, &c.StallTimeout, 10 * time.Minute},
		{EnvAgentUpgradeTimeout, &c.AgentUpgradeTimeout, 10 * time.Minute}} {
		*d.to = d.def
		if v := get(d.env); v != "" {
			t, err := time.ParseDuration(v)
			if err != nil || t <= 0 {
				return Config{}, fmt.Errorf("%s=%q: want a positive duration such as 72h or 10m", d.env, v)
			}
			*d.to = t
		}
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	if abs, err := filepath.Abs(c.DataDir); err == nil {
		c.DataDir = abs
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.EnvFile != "" {
		if abs, err := filepath.Abs(c.EnvFile); err == nil {
			c.EnvFile = abs
		}
	}
	if c.PublicURL == "" {
		scheme := "http"
		if c.TLSCert != "" {
			scheme = "https"
		}
		host := c.Listen
		if h, p, err := net.SplitHostPort(c.Listen); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
			host = net.JoinHostPort("localhost", p)
		}
		c.PublicURL = scheme + "://" + host
	}
	return c, c.Validate()
}

// Validate joins every problem with the configuration. The secret key is
// checked where it is parsed (package seal), so its value never reaches an
// error message here.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("%s %q is not host:port", EnvListen, c.Listen))
	}
	if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("%s %q is not an http(s) URL", EnvPublicURL, c.PublicURL))
	}
	if c.DatabaseURL != "" {
		if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			errs = append(errs, fmt.Errorf("%s is not a postgres:// URL", EnvDatabaseURL))
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together", EnvTLSCert, EnvTLSKey))
	}
	if c.RegistryAuthFile != "" {
		if f, err := os.Open(c.RegistryAuthFile); err != nil {
			errs = append(errs, fmt.Errorf("%s %q cannot be read: %w", EnvRegistryAuthFile, c.RegistryAuthFile, err))
		} else {
			f.Close()
		}
	}
	if c.RegistryAuth != "" && !json.Valid([]byte(c.RegistryAuth)) {
		// Never quote the value: it holds passwords.
		errs = append(errs, fmt.Errorf(`%s is not JSON; want {"registry.example.com": {"username": "...", "password": "..."}}`, EnvRegistryAuth))
	}
	for _, list := range []struct {
		env   string
		hosts []string
	}{{EnvInsecureRegistries, c.InsecureRegistries}, {EnvAllowedRegistries, c.AllowedRegistries}} {
		for _, h := range list.hosts {
			if strings.ContainsAny(h, "/ ") {
				errs = append(errs, fmt.Errorf("%s: %q is not a registry host (host or host:port, no scheme or path)", list.env, h))
			}
		}
	}
	for _, h := range c.WebhookAllowedHosts {
		if _, _, err := net.SplitHostPort(h); err != nil || strings.ContainsAny(h, "/ ") {
			errs = append(errs, fmt.Errorf("%s: %q is not host:port", EnvWebhookAllowedHosts, h))
		}
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("%s %q is not host:port", EnvMetricsListen, c.MetricsListen))
		} else if c.MetricsListen == c.Listen {
			errs = append(errs, fmt.Errorf("%s is the same address as %s; give the metrics their own", EnvMetricsListen, EnvListen))
		}
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("%s %q is not text or json", EnvLogFormat, c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("%s %q is not debug, info, warn or error", EnvLogLevel, c.LogLevel))
	}
	return errors.Join(errs...)
}

// AppendToEnvFile adds key=value to the .env file, creating it with mode
// 0600 (it holds the master key).
func (c Config) AppendToEnvFile(key, value string) error {
	if c.EnvFile == "" {
		return errors.New("no .env file configured")
	}
	existing, err := os.ReadFile(c.EnvFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", c.EnvFile, err)
	}
	f, err := os.OpenFile(c.EnvFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("opening %s: %w", c.EnvFile, err)
	}
	defer f.Close()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("restricting %s: %w", c.EnvFile, err)
	}
	sep := ""
	if len(existing) > 0 && existing[len(existing)-1] != '\n' {
		sep = "\n"
	}
	if _, err := fmt.Fprintf(f, "%s%s=%s\n", sep, key, value); err != nil {
		return fmt.Errorf("writing %s: %w", c.EnvFile, err)
	}
	return f.Sync()
}
