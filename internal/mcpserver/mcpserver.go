// Package mcpserver is the control plane's MCP server (Model Context
// Protocol, streamable HTTP) at /mcp: tools an assistant calls to look at and
// act on deployments. It owns no logic of its own: every tool is one route of
// the REST API, called in process through the API's own handler (the same
// route table, scopes, change sets, idempotency and audit log), as the API
// token the MCP client presents. The commands a tool issues are recorded with
// via "mcp" (httpapi.WithVia).
//
// What is never offered, whatever the token: agent upgrades, instance
// settings, backups and restore, users and every other instance-wide
// administration (replacing the binary of a root process is for people).
// New refuses a tool table that names such a route.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
)

// Path is where the MCP server is mounted; MetadataPath is its protected
// resource metadata (RFC 9728: the well-known prefix before the resource's
// path).
const (
	Path         = "/mcp"
	MetadataPath = "/.well-known/oauth-protected-resource" + Path
)

// Via is what the audit log records of the commands a tool call issues.
const Via = "mcp"

// Defaults of the limits.
const (
	// DefaultMaxBodyBytes bounds a request to /mcp (413 beyond).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultRate and DefaultBurst are each token's request budget: a bucket
	// of DefaultBurst requests refilled at DefaultRate a second (429 with
	// Retry-After when it is empty).
	DefaultRate  = 10
	DefaultBurst = 60
)

// Config is what the MCP server needs.
type Config struct {
	// API is the REST API: its route table, its check of a bearer token, and
	// its handler, which every tool calls in process.
	API *httpapi.API
	// PublicURL is where clients reach the control plane: the resource's
	// identifier is PublicURL + Path.
	PublicURL string
	Version   string
	Logger    *slog.Logger
	// Now is the rate limiter's clock (time.Now when nil).
	Now func() time.Time
	// MaxBodyBytes, Rate and Burst override the defaults.
	MaxBodyBytes int64
	Rate         float64
	Burst        int
}

// Server is the MCP server.
type Server struct {
	cfg     Config
	api     http.Handler
	tools   []boundTool
	limiter *limiter
	handler http.Handler

	mu      sync.Mutex
	servers map[string]*mcp.Server
}

// New checks the tool table against the API's routes (every tool names a
// route there, none an instance administrator's) and returns the server.
func New(cfg Config) (*Server, error) {
	if cfg.API == nil {
		return nil, errors.New("mcpserver: no API")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	bound, err := bind(toolTable(), cfg.API.Routes())
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, api: cfg.API.Handler(), tools: bound, limiter: newLimiter(cfg.Rate, cfg.Burst, cfg.Now),
		servers: map[string]*mcp.Server{}}
	s.handler = s.build()
	return s, nil
}

// Handler serves Path and MetadataPath; mount it at both.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) build() http.Handler {
	streamable := mcp.NewStreamableHTTPHandler(s.serverFor, &mcp.StreamableHTTPOptions{
		// Stateless: every request carries its token and is answered on its
		// own, so any replica answers any request and nothing outlives a
		// revoked token.
		Stateless:    true,
		JSONResponse: true,
		Logger:       quiet(s.cfg.Logger),
		// The body limit is enforced below (and again by the SDK).
		MaxRequestBodyBytes: s.cfg.MaxBodyBytes,
		// The SDK's DNS rebinding guard refuses requests that reach a
		// loopback address under another host name: a reverse proxy on the
		// same machine. Rebinding matters to servers that trust whoever can
		// reach them; this one answers only a valid API token, which a
		// rebinding page does not have. Browsers' cross-origin requests are
		// refused below.
		DisableLocalhostProtection: true,
	})
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := identityOf(r.Context())
		if ok, wait := s.limiter.allow(id.TokenID); !ok {
			secs := int((wait + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", fmt.Sprint(secs))
			http.Error(w, fmt.Sprintf("too many requests for this token: at most %d at once and %g a second; retry in %d s", s.cfg.Burst, s.cfg.Rate, secs),
				http.StatusTooManyRequests)
			return
		}
		streamable.ServeHTTP(w, r)
	})
	authed := auth.RequireBearerToken(s.verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: strings.TrimSuffix(s.cfg.PublicURL, "/") + MetadataPath,
		// Expiry is the API's to decide (by its clock): the verifier
		// refuses an expired token, and a token may have no expiry.
		AllowMissingExpiration: true,
	})(limited)
	origin := http.NewCrossOriginProtection()
	origin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cross-origin requests are refused: MCP clients are programs, not web pages", http.StatusForbidden)
	}))
	// A browser's cross-origin POST is refused (Sec-Fetch-Site, or an
	// Origin that is not the host); the SDK serves nothing but POST.
	mcpHandler := origin.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A body announced over the limit is refused before the token is
		// looked up; the SDK bounds the body it reads as well (chunked too).
		if r.ContentLength > s.cfg.MaxBodyBytes {
			http.Error(w, fmt.Sprintf("the request body is over %d bytes", s.cfg.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		authed.ServeHTTP(w, r)
	}))
	metadata := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               strings.TrimSuffix(s.cfg.PublicURL, "/") + Path,
		ScopesSupported:        scopeNames(domain.Scopes),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "nebulactrl control plane (MCP)",
		ResourceDocumentation:  "https://github.com/nebulactrl/nebulactrl/blob/main/docs/mcp.md",
	})
	mux := http.NewServeMux()
	mux.Handle(Path, mcpHandler)
	mux.Handle(MetadataPath, metadata)
	return mux
}

func scopeNames(ss []domain.Scope) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

type identityKey struct{}

// verify is the bearer-token middleware's verifier: the API's own check
// (httpapi.Authenticate), on every request. Console sessions are refused:
// an assistant acts as an API token, whose scopes bound it and whose name
// the audit log records.
func (s *Server) verify(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
	id, err := s.cfg.API.Authenticate(ctx, token)
	if errors.Is(err, httpapi.ErrUnauthorized) {
		return nil, fmt.Errorf("%w: %s", auth.ErrInvalidToken, strings.TrimPrefix(err.Error(), httpapi.ErrUnauthorized.Error()+": "))
	}
	if err != nil {
		s.cfg.Logger.Error("mcp: checking a token", "err", err)
		return nil, errors.New("the token could not be checked")
	}
	if id.Session {
		return nil, fmt.Errorf("%w: a console session is not an API token: create one (nebula token create) with the scopes the assistant needs", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{Scopes: scopeNames(id.Scopes), UserID: id.TokenID,
		Extra: map[string]any{extraIdentity: id, extraRemote: r.RemoteAddr, extraHost: r.Host}}, nil
}

const (
	extraIdentity = "nebulactrl.identity"
	extraRemote   = "nebulactrl.remoteAddr"
	extraHost     = "nebulactrl.host"
)

func identityOf(ctx context.Context) httpapi.Identity {
	ti := auth.TokenInfoFromContext(ctx)
	if ti == nil {
		return httpapi.Identity{}
	}
	id, _ := ti.Extra[extraIdentity].(httpapi.Identity)
	return id
}

// allowed says whether a token with these scopes may call a route that
// needs scope: tools/list shows only those tools. The API checks again, with
// the token's user's role in the organisation the call names.
func allowed(id httpapi.Identity, scope domain.Scope) bool {
	if scope == "" {
		return true
	}
	if scope == domain.ScopeInstanceAdmin && !id.InstanceAdmin {
		return false
	}
	return slices.Contains(id.Scopes, scope)
}

// serverFor is the MCP server for a request: the tools its token's scopes
// allow. Servers are kept per set of scopes (there are few).
func (s *Server) serverFor(r *http.Request) *mcp.Server {
	id := identityOf(r.Context())
	var tools []boundTool
	var key strings.Builder
	for _, t := range s.tools {
		if allowed(id, t.scope) {
			tools = append(tools, t)
			key.WriteString(t.name)
			key.WriteByte(' ')
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv, ok := s.servers[key.String()]; ok {
		return srv
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "nebulactrl", Title: "nebulactrl control plane", Version: s.cfg.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: quiet(s.cfg.Logger), Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}})
	for _, t := range tools {
		t.add(srv, s)
	}
	s.servers[key.String()] = srv
	return srv
}

const instructions = `Tools of a nebulactrl control plane: organisations contain projects, projects contain environments
(production, staging, ...) and services; a service runs in each environment as a deployment of a release.
Start with list_organisations, then list_projects, list_environments and list_services to learn the names the
other tools take. Every tool is one call of the REST API as your API token: its scopes and your role decide
what you may do, and the organisation's audit log records each change as your token, via mcp.
In a protected environment a change (deploy, rollback, variables, scale) does not apply at once: it opens a
change set that another member must approve (approve_change_set); the tool's result says so and gives its id.
You cannot approve a change set you opened. Secret values are never returned.`

// quiet passes on the SDK's warnings and errors only: a stateless server
// connects a session per request, and the SDK logs each at Info (the access
// log has every request already).
func quiet(l *slog.Logger) *slog.Logger { return slog.New(warnings{l.Handler()}) }

type warnings struct{ slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnings) WithAttrs(as []slog.Attr) slog.Handler { return warnings{w.Handler.WithAttrs(as)} }

func (w warnings) WithGroup(name string) slog.Handler { return warnings{w.Handler.WithGroup(name)} }
