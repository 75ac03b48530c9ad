package agentlink_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Every frame with a string the tables could not store, or should not, is
// refused over a real websocket: the agent gets an error frame naming the
// field and the connection closes; nothing of the frame is stored; another
// agent of the same cluster, connected throughout, is unaffected.
func TestBadAgentFramesAreRefusedAndStoreNothing(t *testing.T) {
	t.Parallel()
	a := servertest.Start(t, servertest.Options{})
	root := a.Setup(t, "root@example.com", "acme")
	org := a.URL + "/api/v1/orgs/acme"
	var cluster api.ClusterResponse
	require.Equal(t, 201, call(t, "POST", org+"/clusters", root, map[string]string{"name": "eu-1"}, &cluster))
	require.Equal(t, 201, call(t, "POST", org+"/projects", root, map[string]string{"name": "shop"}, nil))
	require.Equal(t, 201, call(t, "POST", org+"/projects/shop/environments", root, map[string]string{"name": "staging", "cluster": "eu-1"}, nil))
	var env api.Environment
	require.Equal(t, 200, call(t, "GET", org+"/projects/shop/environments/staging", root, nil, &env))
	register := func(name string) transport.RegisterResponse {
		srv, err := transport.Register(context.Background(), a.URL, nil, transport.RegisterRequest{JoinToken: cluster.JoinToken.Token, Name: name})
		require.NoError(t, err)
		return srv
	}
	bad, good := register("agent-bad"), register("agent-good")
	pool, err := pgxpool.New(context.Background(), a.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	dial := func(cred string) *websocket.Conn {
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(a.URL, "http")+transport.ConnectPath,
			http.Header{"Authorization": {"Bearer " + cred}})
		require.NoError(t, err)
		t.Cleanup(func() { ws.Close() })
		return ws
	}
	// next reads frames until one of type typ (or the close).
	next := func(ws *websocket.Conn, typ string) (transport.Envelope, error) {
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				return transport.Envelope{}, err
			}
			e, err := transport.Decode(b)
			require.NoError(t, err)
			if e.Type == typ {
				return e, nil
			}
		}
	}
	hello := []byte(`{"type":"hello","payload":{"protocol":1,"version":"1.0.0","arch":"amd64","applied":{},"facts":{"leader":true}}}`)
	connect := func(cred string) *websocket.Conn {
		ws := dial(cred)
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, hello))
		_, err := next(ws, transport.TypeWelcome)
		require.NoError(t, err)
		return ws
	}
	goodWS := connect(good.Credential)

	e := env.ID
	now := `"2026-11-30T00:00:00Z"`
	frames := []struct {
		name, frame, field string
		hello              bool
	}{
		{"hello version with NUL", `{"type":"hello","payload":{"protocol":1,"version":"1.0\u0000","arch":"amd64","applied":{}}}`, "version", true},
		{"hello hostname not UTF-8", "{\"type\":\"hello\",\"payload\":{\"protocol\":1,\"version\":\"1.0.0\",\"arch\":\"amd64\",\"applied\":{},\"facts\":{\"hostname\":\"h\xff\"}}}", "UTF-8", true},
		{"node name with NUL", `{"type":"status","payload":{"nodes":[{"name":"n\u0000","ready":true,"cpu":"1","memory":"1Gi","kubeletVersion":"v1"}],"workloads":[],"events":[]}}`, "nodes.name", false},
		{"node cpu with a control character", `{"type":"status","payload":{"nodes":[{"name":"n","ready":true,"cpu":"1\u0007","memory":"1Gi","kubeletVersion":"v1"}],"workloads":[],"events":[]}}`, "nodes.cpu", false},
		{"event message with NUL", fmt.Sprintf(`{"type":"status","payload":{"nodes":[],"workloads":[],"events":[{"environmentId":%q,"namespace":"ns","object":"pod/p","reason":"BackOff","message":"m\u0000","count":1,"lastSeen":%s}]}}`, e, now), "events.message", false},
		{"workload service not UTF-8", fmt.Sprintf("{\"type\":\"status\",\"payload\":{\"nodes\":[],\"workloads\":[{\"environmentId\":%q,\"service\":\"api\xc3\",\"release\":1,\"process\":\"web\",\"desired\":1,\"ready\":1}],\"events\":[]}}", e), "UTF-8", false},
		{"log line with NUL", fmt.Sprintf(`{"type":"logs","payload":{"environmentId":%q,"service":"api","release":1,"pod":"p","container":"c","lines":[{"time":%s,"text":"ok\u0000"}]}}`, e, now), "lines.text", false},
		{"log pod name too long", fmt.Sprintf(`{"type":"logs","payload":{"environmentId":%q,"service":"api","release":1,"pod":%q,"container":"c","lines":[{"time":%s,"text":"ok"}]}}`, e, strings.Repeat("p", 300), now), "pod", false},
		{"log line over 64 KiB", fmt.Sprintf(`{"type":"logs","payload":{"environmentId":%q,"service":"api","release":1,"pod":"p","container":"c","lines":[{"time":%s,"text":%q}]}}`, e, now, strings.Repeat("x", 65<<10)), "lines.text", false},
		{"stage detail with NUL", fmt.Sprintf(`{"type":"stage","payload":{"environmentId":%q,"deploymentId":"00000000-0000-4000-8000-000000000001","service":"api","release":1,"stage":"probing","ready":0,"desired":1,"detail":"x\u0000","time":%s}}`, e, now), "detail", false},
		{"ack reason with NUL", fmt.Sprintf(`{"type":"ack","payload":{"environmentId":%q,"revision":1,"hash":"h","services":[{"service":"api","state":"failed","reason":"r\u0000"}]}}`, e), "services.reason", false},
		{"build report reason with NUL", fmt.Sprintf(`{"type":"build_report","payload":{"buildId":"00000000-0000-4000-8000-000000000002","state":"failed","exitCode":3,"reason":"r\u0000","time":%s}}`, now), "reason", false},
		{"build report with 51 tail lines", fmt.Sprintf(`{"type":"build_report","payload":{"buildId":"b","state":"failed","logTail":[%s],"time":%s}}`, strings.TrimSuffix(strings.Repeat(`"x",`, 51), ","), now), "logTail", false},
		{"build log line with NUL", fmt.Sprintf(`{"type":"build_logs","payload":{"buildId":"b","container":"build","lines":[{"time":%s,"text":"a\u0000"}]}}`, now), "lines.text", false},
		{"build report negative exit code", fmt.Sprintf(`{"type":"build_report","payload":{"buildId":"b","state":"failed","exitCode":-1,"time":%s}}`, now), "exitCode", false},
		{"negative release", fmt.Sprintf(`{"type":"logs","payload":{"environmentId":%q,"service":"api","release":-1,"pod":"p","container":"c","lines":[]}}`, e), "release", false},
	}
	for _, f := range frames {
		var ws *websocket.Conn
		if f.hello {
			ws = dial(bad.Credential)
		} else {
			ws = connect(bad.Credential)
		}
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(f.frame)), f.name)
		got, err := next(ws, transport.TypeError)
		require.NoError(t, err, "%s: an error frame says why", f.name)
		var em transport.ErrorMessage
		require.NoError(t, transport.DecodePayload(got, &em))
		require.Equal(t, "invalid_frame", em.Code, f.name)
		require.Contains(t, em.Message, f.field, f.name)
		_, err = next(ws, "no-such-type")
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce, "%s: the connection closes", f.name)
		require.Equal(t, websocket.ClosePolicyViolation, ce.Code, f.name)
		if f.hello {
			var n int
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM server_status WHERE server_id = $1`, bad.ServerID).Scan(&n))
			require.Zero(t, n, "%s: a refused hello records nothing", f.name)
		}
	}
	// Nothing of any bad frame was stored.
	for _, table := range []string{"node_status", "workload_status", "cluster_events", "log_lines", "deployment_stages", "revision_acks", "build_log_lines"} {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
		require.Zero(t, n, "%s holds rows of refused frames", table)
	}
	var versions []string
	rows, err := pool.Query(context.Background(), `SELECT version FROM server_status`)
	require.NoError(t, err)
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		versions = append(versions, v)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"1.0.0", "1.0.0"}, versions)

	// The other agent was connected throughout, and its frames are stored.
	require.NoError(t, goodWS.WriteMessage(websocket.TextMessage, []byte(
		`{"type":"status","payload":{"nodes":[{"name":"node-1","ready":true,"cpu":"2","memory":"4Gi","kubeletVersion":"v1.31.0"}],"workloads":[],"events":[]}}`)))
	require.NoError(t, goodWS.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf(
		`{"type":"logs","payload":{"environmentId":%q,"service":"api","release":1,"pod":"p","container":"c","lines":[{"time":%s,"text":"\u001b[32mcolours are kept\u001b[0m"}]}}`, e, now))))
	require.Eventually(t, func() bool {
		var nodes, lines int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM node_status), (SELECT count(*) FROM log_lines WHERE line LIKE '%colours are kept%')`).Scan(&nodes, &lines))
		return nodes == 1 && lines == 1
	}, 10*time.Second, 20*time.Millisecond, "the good agent's frames are stored")
	require.NoError(t, goodWS.WriteMessage(websocket.TextMessage, []byte(`{"type":"heartbeat","payload":{"time":"2026-11-30T00:00:00Z","leader":true}}`)))
	_ = goodWS.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, _, err = goodWS.ReadMessage()
	var ce *websocket.CloseError
	require.False(t, errors.As(err, &ce), "the good agent's connection is still open: %v", err)
}
