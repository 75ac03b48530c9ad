package eventstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// restoredIDs is every transaction id the store keeps (events, checkpoints,
// parked events and the events topic's consumer groups), but the zero of a
// checkpoint that never moved.
const restoredIDs = `SELECT t FROM (
	SELECT transaction_id AS t FROM events
	UNION SELECT transaction_id FROM subscription_checkpoints
	UNION SELECT transaction_id FROM parked_events
	UNION SELECT retried_after_tx FROM parked_events WHERE retried_after_tx IS NOT NULL
	UNION SELECT last_processed_transaction_id FROM watermill_offsets_nebula_events
) ids WHERE t <> '0'::xid8`

// RenumberRestored makes the transaction ids of a database restored from a
// dump valid on the PostgreSQL it was restored into. Readers order events by
// the transaction id that wrote them and read only below the oldest running
// transaction; a dump keeps the ids of the PostgreSQL it was taken from, and
// a new PostgreSQL (a new machine's, a new volume's) counts from far below
// them: none of the restored events would be read, and every new event would
// sort before the checkpoints and never be handled. When any kept id is not
// below this PostgreSQL's next one, the ids are renumbered 3, 4, ... in their
// order (checkpoints, parked events and the topic's offsets with them, so
// each still names the same point), after moving this PostgreSQL's counter past them if
// it is not yet; on the PostgreSQL the dump came from nothing changes. It
// returns how many ids were renumbered. Nothing may write to the database
// meanwhile (a restore's target: no control plane runs on it yet).
func RenumberRestored(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var n, highest, next int64
	err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(t::text::bigint), 0), pg_current_xact_id()::text::bigint FROM (`+restoredIDs+`) r`).
		Scan(&n, &highest, &next)
	if err != nil {
		return 0, fmt.Errorf("reading the restored transaction ids: %w", err)
	}
	if n == 0 || highest < next {
		return 0, nil
	}
	// The new ids run from 3 to n+2: every transaction from now on must
	// come after them. Each transaction of the loop takes an id.
	if burn := n + 3 - next; burn > 0 {
		sql := fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$`, burn)
		if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
			return 0, fmt.Errorf("advancing the transaction counter past the restored ids: %w", err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var renumbered int64
	err = tx.QueryRow(ctx, `WITH m AS (
		SELECT t AS old, (2 + row_number() OVER (ORDER BY t))::text::xid8 AS new FROM (`+restoredIDs+`) r
	), e AS (
		UPDATE events x SET transaction_id = m.new FROM m WHERE x.transaction_id = m.old RETURNING 1
	), c AS (
		UPDATE subscription_checkpoints x SET transaction_id = coalesce((SELECT new FROM m WHERE old = x.transaction_id), x.transaction_id) RETURNING 1
	), p AS (
		UPDATE parked_events x SET transaction_id = coalesce((SELECT new FROM m WHERE old = x.transaction_id), x.transaction_id),
			retried_after_tx = coalesce((SELECT new FROM m WHERE old = x.retried_after_tx), x.retried_after_tx) RETURNING 1
	), w AS (
		UPDATE watermill_offsets_nebula_events x SET last_processed_transaction_id =
			coalesce((SELECT new FROM m WHERE old = x.last_processed_transaction_id), x.last_processed_transaction_id) RETURNING 1
	) SELECT (SELECT count(*) FROM m) + 0 * ((SELECT count(*) FROM e) + (SELECT count(*) FROM c) +
		(SELECT count(*) FROM p) + (SELECT count(*) FROM w))`).Scan(&renumbered)
	if err != nil {
		return 0, fmt.Errorf("renumbering the restored transaction ids: %w", err)
	}
	// Every renumbered id must now lie below this transaction's own.
	var below bool
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(t::text::bigint), 0) < pg_current_xact_id()::text::bigint FROM (`+restoredIDs+`) r`).Scan(&below); err != nil {
		return 0, fmt.Errorf("checking the renumbered transaction ids: %w", err)
	}
	if !below {
		return 0, fmt.Errorf("renumbering the restored transaction ids: they are not below this PostgreSQL's transaction counter")
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("renumbering the restored transaction ids: %w", err)
	}
	return renumbered, nil
}
