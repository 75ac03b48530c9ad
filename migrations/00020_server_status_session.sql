-- +goose Up
-- The connection that holds a server's lease (transport's session id), so
-- that the late disconnect of an earlier connection to the same replica does
-- not release the lease of the connection that replaced it.
ALTER TABLE server_status ADD COLUMN session text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE server_status DROP COLUMN session;
