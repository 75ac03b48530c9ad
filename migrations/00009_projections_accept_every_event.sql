-- +goose Up
-- A projection must be able to store every event the domain accepted: a
-- constraint the domain does not guarantee stops the projections for every
-- organisation the moment an event breaks it. Hashes of tokens and
-- credentials are unique in practice (random secrets), but nothing decides
-- so; lookups keep their index.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_token_hash_key;
CREATE INDEX api_tokens_token_hash ON api_tokens (token_hash);
ALTER TABLE cluster_join_tokens DROP CONSTRAINT cluster_join_tokens_token_hash_key;
ALTER TABLE servers DROP CONSTRAINT servers_credential_hash_key;

-- +goose Down
DROP INDEX api_tokens_token_hash;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash);
ALTER TABLE cluster_join_tokens ADD CONSTRAINT cluster_join_tokens_token_hash_key UNIQUE (token_hash);
ALTER TABLE servers ADD CONSTRAINT servers_credential_hash_key UNIQUE (credential_hash);
