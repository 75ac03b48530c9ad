-- +goose Up
-- The way a command reached the control plane when it was not the REST API
-- itself: 'mcp' for a tool call of the MCP server (/mcp), '' otherwise. Set
-- only in process (internal/mcpserver), never from a request header; the
-- audit log carries it into its hash chain only when it is not empty, so
-- the rows written before stay valid.
ALTER TABLE events ADD COLUMN via text NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN via text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE audit_log DROP COLUMN via;
ALTER TABLE events DROP COLUMN via;
