package mcpserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/mcpserver"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
)

// FuzzToolArguments sends any bytes as a tool call's arguments, as the
// token whose user is a viewer but whose scopes show the write tools: the
// answer is a JSON-RPC answer (a parse error, a tool error), never a server
// error, and nothing ever changes.
func FuzzToolArguments(f *testing.F) {
	fx := newFixture(f, servertest.Options{})
	token := fx.tokens["overreach"]
	url := fx.srv.URL + mcpserver.Path
	for _, seed := range []string{
		`{"org":"acme","project":"shop","environment":"staging","service":"api","image":"x"}`,
		`{"org":"acme","project":"shop","environment":"staging","service":"api","image":42}`,
		`{"org":"acme"`, `[]`, `null`, `"deploy"`, `{"org":{"$ne":1}}`, `{"org":"acme","org":"other"}`,
		`{"org":"acme\u0000","project":"shop","environment":"staging","service":"api"}`,
		`{"org":"acme","project":"shop","environment":"staging","service":"api","image":"` + strings.Repeat("A", 100_000) + `"}`,
		`{"org":"acme","project":"shop","environment":"staging","service":"../../instance/settings"}`,
		`{"org":"acme","project":"shop","environment":"staging","service":"api","image":"\ud800"}`,
		"\x00\xff\xfe", `{"org":1e999}`,
	} {
		for _, tool := range []string{"deploy", "set_variables", "list_services"} {
			f.Add(tool, seed)
		}
	}
	f.Fuzz(func(t *testing.T, tool, args string) {
		body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
			"params": map[string]any{"name": tool, "arguments": json.RawMessage(args)}})
		if err != nil {
			// Not JSON: sent as it is, inside the message.
			body = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":` + strconvQuote(tool) + `,"arguments":` + args + `}}`)
		}
		status, _, answer := post(t, url, token.Secret, string(body), nil)
		// 429: the token's budget, spent by a fuzzing run.
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests}, status, "%s", answer)
		if status == http.StatusOK {
			var msg struct {
				Result *struct {
					IsError bool `json:"isError"`
				} `json:"result"`
				Error *struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(answer), &msg), "%s", answer)
			require.True(t, msg.Error != nil || msg.Result != nil, "%s", answer)
			if msg.Result != nil && tool != "list_services" {
				require.True(t, msg.Result.IsError, "a viewer's change went through: %s", answer)
			}
		}
		require.Zero(t, fx.count(t, `SELECT count(*) FROM events WHERE actor_id = $1`, token.ID), "nothing changed")
	})
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Each token has its own bucket: past its burst it gets 429 with
// Retry-After, another token does not, and the bucket refills with time.
func TestRateLimitPerToken(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Now())
	f := newFixture(t, servertest.Options{Now: clock.Now})
	url := f.srv.URL + mcpserver.Path
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	a, b := f.tokens["assistant"].Secret, f.tokens["viewer"].Secret
	for i := range mcpserver.DefaultBurst {
		status, _, body := post(t, url, a, list, nil)
		require.Equal(t, http.StatusOK, status, "request %d: %s", i+1, body)
	}
	status, header, body := post(t, url, a, list, nil)
	require.Equal(t, http.StatusTooManyRequests, status, body)
	require.Equal(t, "1", header.Get("Retry-After"))
	require.Contains(t, body, "too many requests for this token")

	status, _, body = post(t, url, b, list, nil)
	require.Equal(t, http.StatusOK, status, "another token has its own bucket: %s", body)

	clock.Advance(time.Second)
	for range mcpserver.DefaultRate {
		status, _, body := post(t, url, a, list, nil)
		require.Equal(t, http.StatusOK, status, body)
	}
	status, _, _ = post(t, url, a, list, nil)
	require.Equal(t, http.StatusTooManyRequests, status, "a second refills %d requests, no more", mcpserver.DefaultRate)
}
