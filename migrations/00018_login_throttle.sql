-- +goose Up
-- Sign-in throttling in a sliding window instead of fixed quarter hours:
-- per key (an e-mail and client address pair, or a client address), the
-- times of its counted attempts within the window, oldest first. An attempt
-- is allowed while fewer than the limit are younger than the window, so no
-- window boundary lets more guesses through, and a refused client may try
-- again when its oldest counted attempt leaves the window.
CREATE TABLE login_throttle (
    key      text          PRIMARY KEY,
    attempts timestamptz[] NOT NULL
);
DROP TABLE login_attempts;

-- +goose Down
DROP TABLE login_throttle;
CREATE TABLE login_attempts (
    key          text        NOT NULL,
    window_start timestamptz NOT NULL,
    attempts     integer     NOT NULL,
    PRIMARY KEY (key, window_start)
);
