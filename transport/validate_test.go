package transport_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Storable makes any container output acceptable to the control plane, and
// the rules accept what it makes.
func TestStorableTextPassesTheFrameRules(t *testing.T) {
	for _, s := range []string{"plain", "nul\x00inside", "bad \xff\xfe bytes", "\x1b[31mred\x1b[0m\r", strings.Repeat("é", 40000), "cut \xe2\x82"} {
		out := transport.Storable(s, transport.MaxLogLine)
		require.True(t, utf8.ValidString(out), "%q", s)
		require.NotContains(t, out, "\x00")
		require.LessOrEqual(t, len(out), transport.MaxLogLine)
		lg := transport.Logs{EnvironmentID: "e", Service: "api", Pod: "p", Container: "c", Lines: []transport.LogLine{{Text: out}}}
		require.NoError(t, lg.Validate(), "%q", s)
	}
	require.Equal(t, "\x1b[31mred\x1b[0m\r", transport.Storable("\x1b[31mred\x1b[0m\r", 100), "terminal colours are kept")
	require.Equal(t, "ab", transport.Storable("abé", 3), "cut at a character boundary")
}

func manyRecorded(n int) map[string]transport.AppliedRevision {
	m := map[string]transport.AppliedRevision{}
	for i := range n {
		m[fmt.Sprint(i)] = transport.AppliedRevision{Revision: 1}
	}
	return m
}

func TestFrameRules(t *testing.T) {
	for name, v := range map[string]transport.Validator{
		"hello version NUL":       transport.Hello{Version: "1\x00"},
		"hello arch control":      transport.Hello{Arch: "amd\x0764"},
		"hello applied key":       transport.Hello{Applied: map[string]int{strings.Repeat("e", 200): 1}},
		"hello recorded hash":     transport.Hello{Recorded: map[string]transport.AppliedRevision{"e": {Revision: 1, Hash: "h\x00"}}},
		"hello recorded revision": transport.Hello{Recorded: map[string]transport.AppliedRevision{"e": {Revision: -1}}},
		"hello recorded too many": transport.Hello{Recorded: manyRecorded(10001)},
		"upgrade reason":          transport.Hello{Facts: transport.Facts{AgentUpgrade: &transport.UpgradeFacts{Reason: "x\x00"}}},
		"ack hash":                transport.Ack{Hash: "h\x00"},
		"ack revision too large":  transport.Ack{EnvironmentID: "e", Revision: 1 << 31},
		"status nodes":            transport.Status{Nodes: make([]transport.NodeStatus, 5001)},
		"status event message":    transport.Status{Events: []transport.ClusterEvent{{Message: "\xff"}}},
		"logs too many lines":     transport.Logs{Lines: make([]transport.LogLine, 10001)},
		"stage service":           transport.StageReport{Service: strings.Repeat("s", 254)},
		"upgrade result":          transport.AgentUpgradeResult{Error: "\x00"},
	} {
		err := v.Validate()
		require.Error(t, err, name)
		require.True(t, errors.Is(err, transport.ErrInvalidFrame), name)
	}
	require.NoError(t, transport.Hello{Version: "1.2.3", Arch: "arm64", Applied: map[string]int{"e": 3},
		Facts: transport.Facts{Hostname: "node-1", OS: "linux", KubernetesVersion: "v1.31.0"}}.Validate())
	require.NoError(t, transport.Status{Events: []transport.ClusterEvent{{Message: "Back-off\tpulling image\n"}}}.Validate())
}

// transport may not import domain (the layout test), so it holds its own
// copy of the text rule; both must accept and refuse the same strings.
func TestTextRuleIsTheDomains(t *testing.T) {
	for _, s := range []string{"", "plain", "tab\there", "new\nline", "cr\rhere", "nul\x00", "del\x7f", "esc\x1b[0m",
		"bad \xff", "cut \xe2\x82", "é ü 日本", "\u202e", "\u0085", strings.Repeat("x", 129)} {
		want := domain.ValidateText("f", s, 128) == nil
		got := transport.CheckText("f", s, 128) == nil
		require.Equal(t, want, got, "%q", s)
	}
}
