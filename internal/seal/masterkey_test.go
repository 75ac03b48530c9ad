package seal_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/seal"
)

// randomish is a fixed key that passes the weakness checks, so table tests
// are reproducible.
var randomish = func() []byte {
	b, _ := hex.DecodeString("8f3a1c77e2d94b06a5f0c3198e7d2b64f1a08c5539e6d7b2c40f9a1e6b3d8572")
	return b
}()

func TestParseMasterKey(t *testing.T) {
	t.Parallel()
	std := base64.StdEncoding.EncodeToString(randomish)
	want, err := seal.ParseMasterKey(std)
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^mk_[0-9a-f]{16}$`), want.ID())

	good := map[string]string{
		"standard padded":  std,
		"standard raw":     base64.RawStdEncoding.EncodeToString(randomish),
		"url padded":       base64.URLEncoding.EncodeToString(randomish),
		"url raw":          base64.RawURLEncoding.EncodeToString(randomish),
		"trailing newline": std + "\n",
	}
	for name, in := range good {
		t.Run("good/"+name, func(t *testing.T) {
			t.Parallel()
			k, err := seal.ParseMasterKey(in)
			require.NoError(t, err)
			require.Equal(t, want.ID(), k.ID(), "the id depends on the key, not its encoding")
			require.True(t, k.Equal(want))
		})
	}

	seq := make([]byte, 32)
	down := make([]byte, 32)
	for i := range seq {
		seq[i] = byte(i)
		down[i] = byte(200 - 3*i)
	}
	fifteen := make([]byte, 32)
	for i := range fifteen {
		fifteen[i] = byte((i * 7) % 15 * 17)
	}
	block := append(append([]byte{}, randomish[:16]...), randomish[:16]...)
	period5 := make([]byte, 32)
	for i := range period5 {
		period5[i] = randomish[i%5]
	}
	enc := base64.StdEncoding.EncodeToString
	bad := []struct {
		name, in, why string
	}{
		{"empty", "", "empty"},
		{"blank", "   \n", "empty"},
		{"not base64", "this is not base64 at all, not even close!!", "not base64"},
		{"mixed alphabets", strings.Replace(enc(randomish), enc(randomish)[3:4], "-", 1) + "/", "not base64"},
		{"16 bytes", enc(randomish[:16]), "16 bytes"},
		{"31 bytes", enc(randomish[:31]), "31 bytes"},
		{"33 bytes", enc(append(append([]byte{}, randomish...), 0x42)), "33 bytes"},
		{"64 bytes", enc(append(append([]byte{}, randomish...), randomish...)), "64 bytes"},
		{"all zero", enc(make([]byte, 32)), "same"},
		{"all one byte", enc(bytes.Repeat([]byte{0xA7}, 32)), "same"},
		{"15 distinct", enc(fifteen), "distinct"},
		{"counting up", enc(seq), "counting"},
		{"counting down by 3", enc(down), "counting"},
		{"repeated block", enc(block), "repeat every 16"},
		{"repeated 5 bytes", enc(period5), "distinct"},
		{"passphrase", enc([]byte("correct horse battery staple 42!")), "printable"},
		{"hex text", enc([]byte("8f3a1c77e2d94b06a5f0c3198e7d2b64")), "printable"},
		{"short hex text", enc([]byte("0123456789abcdef0123456789abcdef")), "printable"},
	}
	for _, tc := range bad {
		t.Run("bad/"+tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := seal.ParseMasterKey(tc.in)
			require.ErrorIs(t, err, seal.ErrInvalidMasterKey)
			require.True(t, k.IsZero())
			msg := err.Error()
			require.Contains(t, msg, tc.why)
			require.Contains(t, msg, "NEBULACTRL_SECRET_KEY")
			if in := strings.TrimSpace(tc.in); in != "" {
				require.NotContains(t, msg, in, "the error must not echo the value")
				require.NotContains(t, msg, in[:8], "nor a prefix of it")
			}
			if raw, err := base64.StdEncoding.DecodeString(tc.in); err == nil && len(raw) > 0 {
				require.NotContains(t, msg, string(raw))
				require.NotContains(t, msg, hex.EncodeToString(raw))
			}
		})
	}
}

func TestMasterKeyIDsDiffer(t *testing.T) {
	t.Parallel()
	a, b := newKey(t), newKey(t)
	require.NotEqual(t, a.ID(), b.ID())
	require.False(t, a.Equal(b))
	require.True(t, a.Equal(a))
}

func TestGenerateMasterKey(t *testing.T) {
	t.Parallel()
	s1, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	s2, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	require.NotEqual(t, s1, s2)
	raw, err := base64.StdEncoding.DecodeString(s1)
	require.NoError(t, err)
	require.Len(t, raw, 32)
	_, err = seal.ParseMasterKey(s1)
	require.NoError(t, err)
}

func TestMasterKeyNeverPrints(t *testing.T) {
	t.Parallel()
	encoded, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	k, err := seal.ParseMasterKey(encoded)
	require.NoError(t, err)
	raw, err := base64.StdEncoding.DecodeString(encoded)
	require.NoError(t, err)

	type config struct {
		Key     seal.MasterKey
		private seal.MasterKey
		Ptr     *seal.MasterKey
	}
	cfg := config{Key: k, private: k, Ptr: &k}

	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("text", "key", k, "cfg", cfg)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("json", "key", k, "cfg", cfg)

	outputs := map[string]string{
		"verbs":  fmt.Sprintf("%v %s %#v", k, k, k),
		"more":   fmt.Sprintf("%+v %x %X %q %d %10s %p", k, k, k, k, k, k, &k),
		"struct": fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg),
		"ptr":    fmt.Sprintf("%v %+v %#v", &cfg, &cfg, &cfg),
		"sealer": fmt.Sprintf("%v %+v %s", seal.New(nil, k, nil), *seal.New(nil, k, nil), seal.New(nil, k, nil)),
		"slog":   logs.String(),
	}
	forbidden := []string{
		encoded,
		base64.RawStdEncoding.EncodeToString(raw),
		base64.URLEncoding.EncodeToString(raw),
		base64.RawURLEncoding.EncodeToString(raw),
		hex.EncodeToString(raw),
		strings.ToUpper(hex.EncodeToString(raw)),
		fmt.Sprint(raw),
		fmt.Sprintf("%#v", raw),
		string(raw),
	}
	for name, out := range outputs {
		for _, f := range forbidden {
			// Eight bytes' worth of any encoding is already too much.
			require.NotContains(t, out, f[:min(len(f), 12)], "%s output leaks the key: %s", name, out)
		}
	}
	require.Contains(t, outputs["verbs"], k.ID())
	require.Equal(t, k.ID(), k.String())
	require.Equal(t, k.ID(), fmt.Sprint(k))
	require.Contains(t, logs.String(), k.ID())
}
