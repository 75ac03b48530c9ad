-- +goose Up
-- Releases and revisions record what changed, not the whole configuration
-- again (release.created and revision.compiled, schema 2). Their read models
-- keep versioned rows: a row is valid from release (revision) from_number
-- until to_number, exclusive (NULL: still valid). The whole variable set of a
-- release, or the whole document of a revision, is the rows valid at its
-- number; an update adds rows for what changed and closes the rows it
-- replaces, so the bytes it stores do not grow with the configuration.

-- The variables of each release of a service in an environment.
CREATE TABLE release_variables (
    environment_id uuid    NOT NULL,
    service_id     uuid    NOT NULL,
    name           text    NOT NULL,
    from_number    integer NOT NULL,
    org_id         uuid    NOT NULL,
    to_number      integer,
    value          text    NOT NULL,
    secret         jsonb,
    PRIMARY KEY (environment_id, service_id, name, from_number)
);
-- Rows valid at release n are those with from_number <= n whose end is after
-- n: for the latest release, only the open rows are read.
CREATE INDEX release_variables_valid ON release_variables
    (environment_id, service_id, (coalesce(to_number, 2147483647)));

-- The objects of each revision's desired-state document: "environment" (the
-- schema version and the environment), "service/<id>" (a service without its
-- variables) and "variable/<service id>/<name>".
CREATE TABLE revision_objects (
    environment_id uuid    NOT NULL,
    key            text    NOT NULL,
    from_number    integer NOT NULL,
    org_id         uuid    NOT NULL,
    to_number      integer,
    value          jsonb   NOT NULL,
    PRIMARY KEY (environment_id, key, from_number)
);
CREATE INDEX revision_objects_valid ON revision_objects
    (environment_id, (coalesce(to_number, 2147483647)));

-- What the earlier schema kept whole becomes rows, as a replay of the schema 1
-- events (each carrying the whole set) makes them: each release's (revision's)
-- rows are valid until the next one.
WITH r AS (
    SELECT environment_id, service_id, number, org_id, config,
        lead(number) OVER (PARTITION BY environment_id, service_id ORDER BY number) AS next
    FROM releases
)
INSERT INTO release_variables (environment_id, service_id, name, from_number, org_id, to_number, value, secret)
SELECT r.environment_id, r.service_id, v->>'name', r.number, r.org_id, r.next, coalesce(v->>'value', ''), v->'secret'
FROM r, jsonb_array_elements(CASE WHEN jsonb_typeof(r.config->'variables') = 'array' THEN r.config->'variables' ELSE '[]'::jsonb END) v;
UPDATE releases SET config = config - 'variables' WHERE config ? 'variables';

WITH r AS (
    SELECT environment_id, number, org_id, document::jsonb AS d,
        lead(number) OVER (PARTITION BY environment_id ORDER BY number) AS next
    FROM revisions
), s AS (
    SELECT r.environment_id, r.number, r.org_id, r.next, e AS service
    FROM r, jsonb_array_elements(CASE WHEN jsonb_typeof(r.d->'services') = 'array' THEN r.d->'services' ELSE '[]'::jsonb END) e
)
INSERT INTO revision_objects (environment_id, key, from_number, org_id, to_number, value)
SELECT environment_id, 'environment', number, org_id, next,
    jsonb_build_object('schemaVersion', d->'schemaVersion', 'environment', d->'environment')
FROM r
UNION ALL
SELECT environment_id, 'service/' || (service->>'id'), number, org_id, next, service - 'variables'
FROM s
UNION ALL
SELECT s.environment_id, 'variable/' || (s.service->>'id') || '/' || (v->>'name'), s.number, s.org_id, s.next, v
FROM s, jsonb_array_elements(CASE WHEN jsonb_typeof(s.service->'variables') = 'array' THEN s.service->'variables' ELSE '[]'::jsonb END) v;
ALTER TABLE revisions DROP COLUMN document;

-- +goose StatementBegin
DO $$
BEGIN
    ALTER TABLE revision_objects ALTER COLUMN value SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 is not available: keeping pglz';
END
$$;
-- +goose StatementEnd

-- +goose Down
-- Going back loses the history of variables and documents before the latest
-- release and revision: they are rebuilt from the open rows only.
ALTER TABLE revisions ADD COLUMN document json;
UPDATE revisions SET document = '{}' WHERE document IS NULL;
ALTER TABLE revisions ALTER COLUMN document SET NOT NULL;
UPDATE releases r SET config = r.config || jsonb_build_object('variables', coalesce((
    SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object('name', v.name, 'value', nullif(v.value, ''), 'secret', v.secret)) ORDER BY v.name)
    FROM release_variables v
    WHERE v.environment_id = r.environment_id AND v.service_id = r.service_id
      AND v.from_number <= r.number AND coalesce(v.to_number, 2147483647) > r.number), '[]'::jsonb));
DROP TABLE revision_objects, release_variables;
