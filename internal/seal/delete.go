package seal

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// execer is what a pool and a transaction have in common for a write.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DeleteDataKeys deletes data keys: nothing can open what they sealed
// after. Their owner deletes them with what they sealed (in its
// transaction, through q).
func DeleteDataKeys(ctx context.Context, q execer, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := q.Exec(ctx, `DELETE FROM data_keys WHERE id = ANY($1::uuid[])`, ids)
	return err
}
