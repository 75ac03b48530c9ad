-- +goose Up
-- Desired-state documents make large payloads; lz4 compresses and, above all,
-- decompresses them far faster than the default pglz, which the projection
-- rebuild and every subscription read pay for. Servers built without lz4 keep pglz.
-- +goose StatementBegin
DO $$
BEGIN
    ALTER TABLE events ALTER COLUMN payload SET COMPRESSION lz4;
    ALTER TABLE revisions ALTER COLUMN document SET COMPRESSION lz4;
    ALTER TABLE releases ALTER COLUMN config SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 is not available: keeping pglz';
END
$$;
-- +goose StatementEnd

-- +goose Down
SELECT 1;
