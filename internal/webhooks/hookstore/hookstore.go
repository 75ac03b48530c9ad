// Package hookstore owns the outbound webhooks' tables (migration 00023):
// the endpoints as the webhooks' subscription saw them, one delivery per
// event and endpoint, every attempt, what later events need of earlier
// ones, and the clusters whose agents' leases are watched. Everything
// else calls these functions; none of it writes SQL of its own.
package hookstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// ErrNotFound is a delivery that is not there (or not the endpoint's).
var ErrNotFound = fmt.Errorf("%w", domain.ErrNotFound)

// Endpoint is an endpoint as the sender needs it.
type Endpoint struct {
	ID, OrgID, URL string
	EventTypes     []string
	Secret         domain.SealedValue
	Previous       *domain.SealedValue
	PreviousUntil  *time.Time
	CreatedAt      time.Time
}

func sealedJSON(v *domain.SealedValue) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	return json.Marshal(v)
}

// PutEndpoint records a new endpoint (again: changes nothing).
func PutEndpoint(ctx context.Context, q eventstore.Querier, e Endpoint) error {
	secret, err := sealedJSON(&e.Secret)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `INSERT INTO outbound_webhook_endpoints (id, org_id, url, event_types, secret, created_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING`, e.ID, e.OrgID, e.URL, e.EventTypes, secret, e.CreatedAt)
	if err != nil {
		return fmt.Errorf("recording webhook endpoint %s: %w", e.ID, err)
	}
	return nil
}

// RotateEndpoint records an endpoint's new secret and the one before.
func RotateEndpoint(ctx context.Context, q eventstore.Querier, id string, secret domain.SealedValue, previous *domain.SealedValue, until *time.Time) error {
	s, err := sealedJSON(&secret)
	if err != nil {
		return err
	}
	p, err := sealedJSON(previous)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `UPDATE outbound_webhook_endpoints SET secret = $2, previous = $3, previous_until = $4 WHERE id = $1`, id, s, p, until)
	if err != nil {
		return fmt.Errorf("rotating webhook endpoint %s: %w", id, err)
	}
	return nil
}

// SetEnabled enables or disables an endpoint. Disabling (and deleting)
// fails its pending deliveries with the reason: nothing more is sent.
func SetEnabled(ctx context.Context, q eventstore.Querier, id string, enabled bool, reason string) error {
	if _, err := q.Exec(ctx, `UPDATE outbound_webhook_endpoints SET enabled = $2, failing_since = NULL WHERE id = $1`, id, enabled); err != nil {
		return fmt.Errorf("updating webhook endpoint %s: %w", id, err)
	}
	if enabled {
		return nil
	}
	return failPending(ctx, q, id, reason)
}

// DeleteEndpoint marks an endpoint deleted (its deliveries stay readable
// until pruned) and fails its pending deliveries.
func DeleteEndpoint(ctx context.Context, q eventstore.Querier, id string) error {
	if _, err := q.Exec(ctx, `UPDATE outbound_webhook_endpoints SET deleted = true, enabled = false WHERE id = $1`, id); err != nil {
		return fmt.Errorf("deleting webhook endpoint %s: %w", id, err)
	}
	return failPending(ctx, q, id, "the endpoint was deleted")
}

func failPending(ctx context.Context, q eventstore.Querier, id, reason string) error {
	_, err := q.Exec(ctx, `UPDATE outbound_webhook_deliveries SET status = 'failed', reason = $2, next_attempt_at = NULL, lease_until = NULL,
		leased_by = NULL WHERE endpoint_id = $1 AND status = 'pending'`, id, reason)
	if err != nil {
		return fmt.Errorf("failing the pending deliveries of webhook endpoint %s: %w", id, err)
	}
	return nil
}

// OrgsWithEndpoints are the organisations with at least one enabled
// endpoint.
func OrgsWithEndpoints(ctx context.Context, q eventstore.Querier) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT org_id::text FROM outbound_webhook_endpoints WHERE enabled AND NOT deleted`)
	if err != nil {
		return nil, fmt.Errorf("organisations with webhook endpoints: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("organisations with webhook endpoints: %w", err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// Subscribers are the enabled endpoints of an organisation that receive
// events of type t.
func Subscribers(ctx context.Context, q eventstore.Querier, orgID, t string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id::text FROM outbound_webhook_endpoints
		WHERE org_id = $1 AND enabled AND NOT deleted AND ($2 = ANY(event_types) OR '*' = ANY(event_types)) ORDER BY id`, orgID, t)
	if err != nil {
		return nil, fmt.Errorf("endpoints of %s for %s: %w", orgID, t, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// NewDelivery is a delivery the subscription writes.
type NewDelivery struct {
	ID, OrgID, EndpointID string
	Position              int64
	EventType             string
	Payload               []byte
	// At is when the event happened: the first attempt is due then.
	At time.Time
}

// SubjectName is the kind of the subjects that are names (of
// organisations, projects, environments, services, clusters, by id): kept
// as long as the instance, one row per thing named, where the other
// subjects (what a deployment's, build's or change set's later events need
// of its first) are pruned with the deliveries.
const SubjectName = "name"

// DueChannel is notified when deliveries were written: the senders of every
// replica look for due ones at once rather than at their next poll.
const DueChannel = "nebula_webhooks_due"

// NotifyDue tells the senders, when q's transaction commits, that
// deliveries were written.
func NotifyDue(ctx context.Context, q eventstore.Querier) error {
	if _, err := q.Exec(ctx, `SELECT pg_notify($1, '')`, DueChannel); err != nil {
		return fmt.Errorf("webhooks: notifying the senders: %w", err)
	}
	return nil
}

// InsertDelivery writes a delivery; one already there (the same event
// handled again) stays as it is.
func InsertDelivery(ctx context.Context, q eventstore.Querier, d NewDelivery) error {
	_, err := q.Exec(ctx, `INSERT INTO outbound_webhook_deliveries (id, org_id, endpoint_id, event_position, event_type, payload, next_attempt_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT (id) DO NOTHING`, d.ID, d.OrgID, d.EndpointID, d.Position, d.EventType, d.Payload, d.At)
	if err != nil {
		return fmt.Errorf("writing webhook delivery %s: %w", d.ID, err)
	}
	return nil
}

// Redeliver makes a delivery of the endpoint pending again from at, at the
// start of the retry schedule, its next attempts marked manual. An
// endpoint that is disabled or deleted is not sent to.
func Redeliver(ctx context.Context, q eventstore.Querier, endpointID, deliveryID string, at time.Time) error {
	_, err := q.Exec(ctx, `UPDATE outbound_webhook_deliveries SET status = 'pending', reason = '', retry = 0, manual = true,
		next_attempt_at = $3, lease_until = NULL, leased_by = NULL WHERE id = $2 AND endpoint_id = $1`, endpointID, deliveryID, at)
	if err != nil {
		return fmt.Errorf("redelivering %s: %w", deliveryID, err)
	}
	return nil
}

// PutSubject keeps what later events of a deployment, build or change set
// need to know of it (merged into what is there).
func PutSubject(ctx context.Context, q eventstore.Querier, kind, id string, data any, at time.Time) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `INSERT INTO outbound_webhook_subjects (kind, id, data, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (kind, id) DO UPDATE SET data = outbound_webhook_subjects.data || EXCLUDED.data`, kind, id, b, at)
	if err != nil {
		return fmt.Errorf("keeping %s %s: %w", kind, id, err)
	}
	return nil
}

// Subject reads what PutSubject kept into out; false when nothing was.
func Subject(ctx context.Context, q eventstore.Querier, kind, id string, out any) (bool, error) {
	var b []byte
	err := q.QueryRow(ctx, `SELECT data FROM outbound_webhook_subjects WHERE kind = $1 AND id = $2`, kind, id).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s %s: %w", kind, id, err)
	}
	return true, json.Unmarshal(b, out)
}

// WatchCluster adds a cluster to those whose leases are watched.
func WatchCluster(ctx context.Context, q eventstore.Querier, clusterID, orgID string) error {
	_, err := q.Exec(ctx, `INSERT INTO outbound_webhook_clusters (cluster_id, org_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, clusterID, orgID)
	if err != nil {
		return fmt.Errorf("watching cluster %s: %w", clusterID, err)
	}
	return nil
}

// UnwatchCluster stops watching a deleted cluster.
func UnwatchCluster(ctx context.Context, q eventstore.Querier, clusterID string) error {
	if _, err := q.Exec(ctx, `DELETE FROM outbound_webhook_clusters WHERE cluster_id = $1`, clusterID); err != nil {
		return fmt.Errorf("unwatching cluster %s: %w", clusterID, err)
	}
	return nil
}

// WatchedCluster is a cluster whose leases are watched, with what was last
// recorded of it (Observed nil: nothing yet).
type WatchedCluster struct {
	ClusterID, OrgID string
	Observed         *bool
}

// WatchedClusters lists them.
func WatchedClusters(ctx context.Context, q eventstore.Querier) ([]WatchedCluster, error) {
	rows, err := q.Query(ctx, `SELECT cluster_id::text, org_id::text, observed_connected FROM outbound_webhook_clusters ORDER BY cluster_id`)
	if err != nil {
		return nil, fmt.Errorf("watched clusters: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (WatchedCluster, error) {
		var w WatchedCluster
		return w, r.Scan(&w.ClusterID, &w.OrgID, &w.Observed)
	})
}

// SetObserved keeps what the cluster's stream says of it now (connected or
// not), after a command recorded it or found it so.
func SetObserved(ctx context.Context, q eventstore.Querier, clusterID string, connected bool) error {
	if _, err := q.Exec(ctx, `UPDATE outbound_webhook_clusters SET observed_connected = $2 WHERE cluster_id = $1`, clusterID, connected); err != nil {
		return fmt.Errorf("keeping what was observed of cluster %s: %w", clusterID, err)
	}
	return nil
}

// Leased is a delivery a sender leased, with its endpoint.
type Leased struct {
	ID, OrgID, EndpointID, EventType string
	Payload                          []byte
	Attempts, Retry                  int
	Manual                           bool
	CreatedAt                        time.Time
	Endpoint                         Endpoint
	FailingSince                     *time.Time
}

// Lease takes up to limit due deliveries of enabled endpoints for this
// sender until now+hold: rows another sender holds are skipped, so
// replicas never send the same delivery at once; a sender that died
// leaves its lease to expire.
func Lease(ctx context.Context, q eventstore.Querier, now time.Time, hold time.Duration, by string, limit int) ([]Leased, error) {
	rows, err := q.Query(ctx, `WITH due AS (
			SELECT d.id FROM outbound_webhook_deliveries d JOIN outbound_webhook_endpoints e ON e.id = d.endpoint_id
			WHERE d.status = 'pending' AND d.next_attempt_at <= $1 AND (d.lease_until IS NULL OR d.lease_until <= $1)
			AND e.enabled AND NOT e.deleted
			ORDER BY d.next_attempt_at, d.id LIMIT $4 FOR UPDATE OF d SKIP LOCKED)
		UPDATE outbound_webhook_deliveries d SET lease_until = $2, leased_by = $3 FROM due, outbound_webhook_endpoints e
		WHERE d.id = due.id AND e.id = d.endpoint_id
		RETURNING d.id::text, d.org_id::text, d.endpoint_id::text, d.event_type, d.payload, d.attempts, d.retry, d.manual, d.created_at,
			e.url, e.event_types, e.secret, e.previous, e.previous_until, e.created_at, e.failing_since`,
		now, now.Add(hold), by, limit)
	if err != nil {
		return nil, fmt.Errorf("leasing webhook deliveries: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Leased, error) {
		var l Leased
		var secret, previous []byte
		if err := r.Scan(&l.ID, &l.OrgID, &l.EndpointID, &l.EventType, &l.Payload, &l.Attempts, &l.Retry, &l.Manual, &l.CreatedAt,
			&l.Endpoint.URL, &l.Endpoint.EventTypes, &secret, &previous, &l.Endpoint.PreviousUntil, &l.Endpoint.CreatedAt, &l.FailingSince); err != nil {
			return l, err
		}
		l.Endpoint.ID, l.Endpoint.OrgID = l.EndpointID, l.OrgID
		if err := json.Unmarshal(secret, &l.Endpoint.Secret); err != nil {
			return l, err
		}
		if previous != nil {
			l.Endpoint.Previous = &domain.SealedValue{}
			if err := json.Unmarshal(previous, l.Endpoint.Previous); err != nil {
				return l, err
			}
		}
		return l, nil
	})
}

// Beginner begins transactions (a pool).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Attempt is what one attempt came to.
type Attempt struct {
	DeliveryID string
	At         time.Time
	Duration   time.Duration
	StatusCode int
	Error      string
	Response   string
	Manual     bool
	// Succeeded ends the delivery; otherwise Next is the next attempt's
	// time, or zero when there is none (Reason: why not).
	Succeeded bool
	Next      time.Time
	Reason    string
	// EndpointID's failing_since is cleared on success, set on the first
	// failure after one (or after a day without failures).
	EndpointID string
	// By is the sender that leased the delivery: an attempt is recorded
	// only while the delivery is still pending and leased by it.
	By string
}

// ErrLeaseLost means the delivery is no longer the sender's to record: it
// was failed (its endpoint deleted or disabled), redelivered by hand, or
// leased by another sender after this one's lease ran out, meanwhile.
var ErrLeaseLost = errors.New("the delivery is no longer leased by this sender")

// failingGap is how long without a failed attempt ends an endpoint's run
// of failures: longer than the longest wait between retries (10 h), so a
// delivery retried on schedule keeps its endpoint failing, while one
// failure after days of quiet starts a new run.
const failingGap = 24 * time.Hour

// RecordAttempt writes an attempt and its delivery's new state, and
// returns since when the endpoint has been failing (nil after a success).
func RecordAttempt(ctx context.Context, db Beginner, a Attempt) (*time.Time, error) {
	var since *time.Time
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `UPDATE outbound_webhook_deliveries SET attempts = attempts + 1, last_attempt_at = $2, last_status = $3,
			lease_until = NULL, leased_by = NULL,
			status = CASE WHEN $4 THEN 'succeeded' WHEN $5::timestamptz IS NULL THEN 'failed' ELSE 'pending' END,
			reason = CASE WHEN $4 THEN '' ELSE $6 END,
			retry = CASE WHEN $4 THEN retry ELSE retry + 1 END,
			next_attempt_at = CASE WHEN $4 THEN NULL ELSE $5::timestamptz END
			WHERE id = $1 AND status = 'pending' AND leased_by = $7 AND lease_until IS NOT NULL
			RETURNING attempts`, a.DeliveryID, a.At, a.StatusCode, a.Succeeded, nullTime(a.Next), a.Reason, a.By).Scan(&n); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrLeaseLost
			}
			return fmt.Errorf("recording an attempt of %s: %w", a.DeliveryID, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outbound_webhook_attempts (delivery_id, n, at, duration_ms, status_code, error, response, manual)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, a.DeliveryID, n, a.At, a.Duration.Milliseconds(), a.StatusCode, a.Error, a.Response, a.Manual); err != nil {
			return fmt.Errorf("recording an attempt of %s: %w", a.DeliveryID, err)
		}
		if a.Succeeded {
			// Only when it was failing: every sender's success writing the
			// endpoint's row would make them wait for each other's commits.
			_, err := tx.Exec(ctx, `UPDATE outbound_webhook_endpoints SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL`, a.EndpointID)
			return err
		}
		return tx.QueryRow(ctx, `UPDATE outbound_webhook_endpoints SET
			failing_since = CASE WHEN failing_since IS NULL OR last_failure_at IS NULL OR last_failure_at < $2::timestamptz - $3::interval
				THEN $2 ELSE failing_since END,
			last_failure_at = $2
			WHERE id = $1 RETURNING failing_since`, a.EndpointID, a.At, failingGap).Scan(&since)
	})
	return since, err
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Prune deletes the deliveries (with their attempts) and the kept
// subjects older than before.
func Prune(ctx context.Context, q eventstore.Querier, before time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM outbound_webhook_deliveries WHERE created_at < $1 AND status <> 'pending'`, before)
	if err != nil {
		return 0, fmt.Errorf("pruning webhook deliveries: %w", err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM outbound_webhook_subjects WHERE created_at < $1 AND kind <> $2`, before, SubjectName); err != nil {
		return 0, fmt.Errorf("pruning webhook subjects: %w", err)
	}
	return tag.RowsAffected(), nil
}

const deliveryColumns = `id::text, endpoint_id::text, event_type, status, reason, attempts, created_at, next_attempt_at, last_attempt_at, last_status`

func scanDelivery(r pgx.Row) (api.WebhookDelivery, error) {
	var d api.WebhookDelivery
	err := r.Scan(&d.ID, &d.EndpointID, &d.EventType, &d.Status, &d.Reason, &d.Attempts, &d.CreatedAt, &d.NextAttemptAt, &d.LastAttemptAt, &d.LastStatusCode)
	return d, err
}

// Deliveries lists an endpoint's deliveries, newest first, after the
// delivery named by after ("" for the first page), at most limit.
func Deliveries(ctx context.Context, q eventstore.Querier, endpointID, after string, limit int) ([]api.WebhookDelivery, error) {
	if _, err := uuid.Parse(endpointID); err != nil {
		return []api.WebhookDelivery{}, nil
	}
	where := ` WHERE endpoint_id = $1`
	if after != "" {
		where += ` AND (created_at, id) < (SELECT created_at, id FROM outbound_webhook_deliveries WHERE id = $2::uuid)`
	} else {
		where += ` AND $2 = ''`
	}
	rows, err := q.Query(ctx, `SELECT `+deliveryColumns+` FROM outbound_webhook_deliveries`+where+` ORDER BY created_at DESC, id DESC LIMIT $3`,
		endpointID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("deliveries of webhook endpoint %s: %w", endpointID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (api.WebhookDelivery, error) { return scanDelivery(r) })
	if err != nil {
		return nil, fmt.Errorf("deliveries of webhook endpoint %s: %w", endpointID, err)
	}
	if out == nil {
		out = []api.WebhookDelivery{}
	}
	return out, nil
}

// Delivery reads one of an endpoint's deliveries with its payload and
// attempts, oldest first.
func Delivery(ctx context.Context, q eventstore.Querier, endpointID, id string) (api.WebhookDeliveryDetail, error) {
	var out api.WebhookDeliveryDetail
	if _, err := uuid.Parse(id); err != nil {
		return out, fmt.Errorf("%w: delivery %s", ErrNotFound, id)
	}
	if _, err := uuid.Parse(endpointID); err != nil {
		return out, fmt.Errorf("%w: delivery %s", ErrNotFound, id)
	}
	var payload []byte
	row := q.QueryRow(ctx, `SELECT `+deliveryColumns+`, payload FROM outbound_webhook_deliveries WHERE id = $1 AND endpoint_id = $2`, id, endpointID)
	d, err := scanDeliveryWith(row, &payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, fmt.Errorf("%w: delivery %s", ErrNotFound, id)
	}
	if err != nil {
		return out, fmt.Errorf("delivery %s: %w", id, err)
	}
	out.Delivery, out.Payload = d, json.RawMessage(payload)
	rows, err := q.Query(ctx, `SELECT n, at, duration_ms, status_code, error, response, manual FROM outbound_webhook_attempts
		WHERE delivery_id = $1 ORDER BY n`, id)
	if err != nil {
		return out, fmt.Errorf("attempts of %s: %w", id, err)
	}
	out.AttemptList, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (api.WebhookAttempt, error) {
		var a api.WebhookAttempt
		return a, r.Scan(&a.N, &a.At, &a.DurationMs, &a.StatusCode, &a.Error, &a.Response, &a.Manual)
	})
	if out.AttemptList == nil {
		out.AttemptList = []api.WebhookAttempt{}
	}
	return out, err
}

func scanDeliveryWith(r pgx.Row, payload *[]byte) (api.WebhookDelivery, error) {
	var d api.WebhookDelivery
	err := r.Scan(&d.ID, &d.EndpointID, &d.EventType, &d.Status, &d.Reason, &d.Attempts, &d.CreatedAt, &d.NextAttemptAt, &d.LastAttemptAt, &d.LastStatusCode, payload)
	return d, err
}
