package eventstore

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
)

// The watermill topic of the events is the events table itself: the
// watermill-sql schema and offsets adapters below read it in commit order
// (transaction_id, position) behind the commit horizon, as the subscriptions
// do, so an append writes its events and nothing else. Watermill's
// subscriber keeps each consumer group's offset (a point in commit order) in
// watermill_offsets_nebula_events and reads with the group's row locked, so
// one group never sees an event twice.

// Topic is the watermill topic whose messages are the events, one message
// per event, in commit order.
const Topic = "nebula_events"

// ErrPublishRefused is the error of publishing to Topic through watermill:
// events are appended through Store.Append, which checks the stream's
// expected version and claims names in the same transaction; a publisher
// would do neither.
var ErrPublishRefused = errors.New("the events topic is the events table: append through eventstore.Store, not a watermill publisher")

// topicBatch is how many events one read of the topic returns: a message
// is a wake-up, so a backlog needs few reads, and each read holds the
// group's row only briefly.
const topicBatch = 500

// offsetsTable keeps each consumer group's point in commit order.
const offsetsTable = `"watermill_offsets_nebula_events"`

// eventsNamespace makes a stable message UUID of an event's position.
var eventsNamespace = uuid.MustParse("6b1d2f3e-8a4c-5e7f-9b0d-1c2e3f4a5b6c")

// EventsSchema is the watermill-sql schema adapter of Topic: the events
// table, read in commit order behind the commit horizon.
type EventsSchema struct{}

var _ wsql.SchemaAdapter = EventsSchema{}

// InsertQuery refuses: events are appended through the Store.
func (EventsSchema) InsertQuery(p wsql.InsertQueryParams) (wsql.Query, error) {
	return wsql.Query{}, fmt.Errorf("publishing %d messages to %s: %w", len(p.Msgs), p.Topic, ErrPublishRefused)
}

// SelectQuery reads the events after the group's offset, in commit order,
// only from transactions below the commit horizon: an append that commits
// late (its transaction began before later ones committed) is read when the
// horizon passes it, never skipped.
func (EventsSchema) SelectQuery(p wsql.SelectQueryParams) (wsql.Query, error) {
	if p.Topic != Topic {
		return wsql.Query{}, fmt.Errorf("reading topic %q: the events schema has only the topic %q", p.Topic, Topic)
	}
	next, err := p.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{Topic: p.Topic, ConsumerGroup: p.ConsumerGroup})
	if err != nil {
		return wsql.Query{}, err
	}
	// The row comparison walks the commit-order index from the offset.
	q := `WITH last_processed AS (` + next.Query + `)
	SELECT position, transaction_id::text::bigint AS txid, stream_id, stream_version, event_type, request_id FROM events
	WHERE (transaction_id, position) > ((SELECT last_processed_transaction_id FROM last_processed),
	                                    (SELECT coalesce(offset_acked, 0) FROM last_processed))
	  AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
	ORDER BY transaction_id, position
	LIMIT ` + strconv.Itoa(topicBatch)
	return wsql.Query{Query: q, Args: next.Args}, nil
}

// TopicMessage is the payload of a message of Topic: which event it is.
// The event itself is read from the store.
type TopicMessage struct {
	StreamID string `json:"streamId"`
	Version  int    `json:"version"`
	Type     string `json:"type"`
}

// UnmarshalMessage makes a message of one event row: its UUID is derived
// from the event's position (the same on every read), its payload a
// TopicMessage, its metadata the request id that appended it.
func (EventsSchema) UnmarshalMessage(p wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var pos, tx int64
	var m TopicMessage
	var requestID string
	if err := p.Row.Scan(&pos, &tx, &m.StreamID, &m.Version, &m.Type, &requestID); err != nil {
		return wsql.Row{}, fmt.Errorf("reading an event of topic %s: %w", Topic, err)
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return wsql.Row{}, err
	}
	id := uuid.NewSHA1(eventsNamespace, []byte(strconv.FormatInt(pos, 10))).String()
	msg := message.NewMessage(id, payload)
	if requestID != "" {
		msg.Metadata.Set("request_id", requestID)
	}
	return wsql.Row{Offset: pos, UUID: []byte(id), Payload: payload, Msg: msg,
		ExtraData: map[string]any{"transaction_id": strconv.FormatInt(tx, 10)}}, nil
}

// SchemaInitializingQueries creates nothing: the migrations own the events
// table.
func (EventsSchema) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// SubscribeIsolationLevel is repeatable read, as watermill's own PostgreSQL
// schema: the read sees one snapshot, and its horizon with it.
func (EventsSchema) SubscribeIsolationLevel() sql.IsolationLevel { return sql.LevelRepeatableRead }

// EventsOffsets is the watermill-sql offsets adapter of Topic: each
// consumer group's offset is a point in commit order (a transaction id and
// a position), and a group starts at the commit horizon whenever it
// subscribes, not at the first event: its messages are wake-ups, and what a
// process's subscribers have to catch up on when it starts they read from
// their own checkpoints.
type EventsOffsets struct{}

var _ wsql.OffsetsAdapter = EventsOffsets{}

// SchemaInitializingQueries creates nothing: the migrations own the table.
func (EventsOffsets) SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// NextOffsetQuery reads the group's offset and locks its row until the read
// commits: two subscribers of one group never read the same events.
func (EventsOffsets) NextOffsetQuery(p wsql.NextOffsetQueryParams) (wsql.Query, error) {
	return wsql.Query{Query: `SELECT offset_acked, last_processed_transaction_id FROM ` + offsetsTable + `
		WHERE consumer_group = $1 FOR UPDATE`, Args: []any{p.ConsumerGroup}}, nil
}

// AckMessageQuery moves the group's offset to the last event acked.
func (EventsOffsets) AckMessageQuery(p wsql.AckMessageQueryParams) (wsql.Query, error) {
	tx, ok := p.LastRow.ExtraData["transaction_id"].(string)
	if !ok {
		return wsql.Query{}, fmt.Errorf("acking event %d of %s: the row has no transaction id", p.LastRow.Offset, p.Topic)
	}
	return wsql.Query{Query: `UPDATE ` + offsetsTable + ` SET offset_acked = $1, last_processed_transaction_id = $2::text::xid8
		WHERE consumer_group = $3`, Args: []any{p.LastRow.Offset, tx, p.ConsumerGroup}}, nil
}

// ConsumedMessageQuery is none: the row lock of NextOffsetQuery already
// keeps a group's subscribers apart.
func (EventsOffsets) ConsumedMessageQuery(wsql.ConsumedMessageQueryParams) (wsql.Query, error) {
	return wsql.Query{}, nil
}

// BeforeSubscribingQueries puts the group at the last event below the
// commit horizon (creating its row, which NextOffsetQuery locks): every
// event after it is in a transaction that had not ended yet.
func (EventsOffsets) BeforeSubscribingQueries(p wsql.BeforeSubscribingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{{Query: `INSERT INTO ` + offsetsTable + ` (consumer_group, offset_acked, last_processed_transaction_id)
		SELECT $1, coalesce(h.position, 0), coalesce(h.transaction_id, '0'::xid8)
		FROM (SELECT 1) one LEFT JOIN LATERAL (
			SELECT position, transaction_id FROM events
			WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
			ORDER BY transaction_id DESC, position DESC LIMIT 1) h ON true
		ON CONFLICT (consumer_group) DO UPDATE
		SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id`,
		Args: []any{p.ConsumerGroup}}}, nil
}
