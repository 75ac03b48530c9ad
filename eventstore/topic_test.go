package eventstore_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// belowHorizon waits until the n events appended so far are behind the
// commit horizon (every test's transactions share the cluster's horizon):
// a consumer group that subscribes then starts after them.
func belowHorizon(t *testing.T, s *eventstore.Store, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		evs, err := s.ReadAll(context.Background(), eventstore.Cursor{}, n+1)
		require.NoError(t, err)
		return len(evs) == n
	}, 10*time.Second, 5*time.Millisecond, "%d events behind the commit horizon", n)
}

func topicSubscriber(t *testing.T, pool *pgxpool.Pool, group string) <-chan *message.Message {
	t.Helper()
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
		ConsumerGroup: group, SchemaAdapter: eventstore.EventsSchema{}, OffsetsAdapter: eventstore.EventsOffsets{},
		PollInterval: 50 * time.Millisecond, RetryInterval: 50 * time.Millisecond, ResendInterval: 50 * time.Millisecond,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(context.Background(), eventstore.Topic)
	require.NoError(t, err)
	return msgs
}

// The events table is the watermill topic: one message per event, in
// commit order, from the commit horizon at subscription on (no replay of
// history), each event once per consumer group however many subscribers
// the group has, and every group gets every event.
func TestEventsTopicDeliversEveryEventOncePerGroup(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := eventstore.New(pool, nil)
	ctx := context.Background()
	_, err := s.Append(ctx, appendReq("before", 0, rec("a", 1), rec("a", 2)))
	require.NoError(t, err)
	belowHorizon(t, s, 2)

	type got struct {
		group string
		uuid  string
		m     eventstore.TopicMessage
		req   string
	}
	var mu sync.Mutex
	var seen []got
	consume := func(group string, msgs <-chan *message.Message) {
		for msg := range msgs {
			var m eventstore.TopicMessage
			if err := json.Unmarshal(msg.Payload, &m); err != nil {
				t.Errorf("payload %s: %v", msg.Payload, err)
			}
			mu.Lock()
			seen = append(seen, got{group, msg.UUID, m, msg.Metadata.Get("request_id")})
			mu.Unlock()
			msg.Ack()
		}
	}
	go consume("g", topicSubscriber(t, pool, "g"))
	go consume("g", topicSubscriber(t, pool, "g"))
	go consume("h", topicSubscriber(t, pool, "h"))

	_, err = s.Append(ctx, appendReq("x", 0, rec("x.one", 1), rec("x.two", 2)))
	require.NoError(t, err)
	_, err = s.Append(ctx, appendReq("y", 0, rec("y.one", 1)))
	require.NoError(t, err)
	_, err = s.Append(ctx, appendReq("x", 2, rec("x.three", 3), rec("x.four", 4)))
	require.NoError(t, err)

	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	require.Eventually(t, func() bool { return count() >= 10 }, 15*time.Second, 10*time.Millisecond, "5 events for each of 2 groups")
	// Long enough for any second delivery to come (the subscribers poll
	// every 50 ms).
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 10, "no event twice, none of the history before subscribing: %+v", seen)
	want := []eventstore.TopicMessage{{"x", 1, "x.one"}, {"x", 2, "x.two"}, {"y", 1, "y.one"}, {"x", 3, "x.three"}, {"x", 4, "x.four"}}
	for _, group := range []string{"g", "h"} {
		var ms []eventstore.TopicMessage
		uuids := map[string]bool{}
		for _, g := range seen {
			if g.group == group {
				ms = append(ms, g.m)
				uuids[g.uuid] = true
				require.Equal(t, "req-1", g.req, "the request id travels as metadata")
			}
		}
		require.Equal(t, want, ms, "group %s: every event once, in commit order", group)
		require.Len(t, uuids, 5, "group %s: one message id per event", group)
	}
	// A message's id is the event's, whichever group reads it.
	ids := map[string]int{}
	for _, g := range seen {
		ids[g.uuid]++
	}
	require.Len(t, ids, 5)
}

// Publishing to the topic is refused with a clear error and writes nothing:
// appends go through the store, which checks versions and claims names.
func TestEventsTopicRefusesPublishing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(pool), wsql.PublisherConfig{SchemaAdapter: eventstore.EventsSchema{}}, watermill.NopLogger{})
	require.NoError(t, err)
	err = pub.Publish(eventstore.Topic, message.NewMessage(watermill.NewUUID(), []byte(`{}`)))
	require.ErrorIs(t, err, eventstore.ErrPublishRefused)
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n))
	require.Zero(t, n)
}

// The waker's watermill subscription alone (no LISTEN: every notification
// is lost to it) wakes its subscribers after an append, and not for the
// events committed before it started.
func TestWakerTopicAloneWakesOnAppend(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := eventstore.New(pool, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		_, err := s.Append(ctx, appendReq("old", i, rec("a", i)))
		require.NoError(t, err)
	}
	belowHorizon(t, s, 3)
	w := s.NewWaker("topic-only")
	ch := w.Subscribe()
	go w.RunTopic(ctx, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM watermill_offsets_nebula_events WHERE consumer_group = 'topic-only'`).Scan(&n))
		return n == 1
	}, 10*time.Second, 10*time.Millisecond, "the consumer group is subscribed")
	select {
	case <-ch:
		t.Fatal("woken for the events committed before the waker started")
	case <-time.After(500 * time.Millisecond):
	}
	_, err := s.Append(ctx, appendReq("new", 0, rec("a", 1)))
	require.NoError(t, err)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up from the events topic after an append")
	}
	// The topic says what was appended, as a notification would: the
	// agents' push acts on it without LISTEN.
	require.Eventually(t, func() bool {
		appended, lost := w.TakeAppended()
		return !lost && slices.Contains(appended, "new@1")
	}, 5*time.Second, 10*time.Millisecond)
}
