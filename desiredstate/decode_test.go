package desiredstate

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeRoundTrip(t *testing.T) {
	want := sample()
	b := mustCanonical(t, want)
	got, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, string(b), string(mustCanonical(t, got)))
}

func TestDecodeNormalises(t *testing.T) {
	base := sample()
	api := &base.Services[0]
	api.Processes = append(api.Processes, Process{Name: "aaa", Command: []string{}})
	d := scrambled(base, rand.New(rand.NewPCG(5, 6)))
	// Encode without normalising, as a sloppy sender would.
	var buf bytes.Buffer
	require.NoError(t, jsonEncode(&buf, d))
	got, err := Decode(buf.Bytes())
	require.NoError(t, err)
	require.Equal(t, normalize(d), got)
	require.Equal(t, "api", got.Services[0].Name)
	require.Equal(t, "aaa", got.Services[0].Processes[0].Name)
	require.Nil(t, got.Services[0].Processes[0].Command, "an empty command decodes like an absent one")
}

func TestDecodeRejects(t *testing.T) {
	valid := string(mustCanonical(t, sample()))
	tests := map[string]struct {
		in      string
		wantErr error // nil: any error
		msg     string
	}{
		"not json":         {in: "{", msg: "decode"},
		"empty":            {in: "", msg: "decode"},
		"trailing data":    {in: valid + " {}", msg: "invalid character"},
		"two documents":    {in: valid + valid},
		"unknown field":    {in: `{"schemaVersion":1,"environment":{},"services":[],"extra":1}`, msg: `unknown field "extra"`},
		"unknown nested":   {in: `{"schemaVersion":1,"services":[{"name":"a","release":{},"color":"red"}]}`, msg: `unknown field "color"`},
		"no version":       {in: `{"environment":{},"services":[]}`, wantErr: ErrUnsupportedSchema, msg: "no schemaVersion"},
		"null":             {in: `null`, wantErr: ErrUnsupportedSchema},
		"version 2":        {in: `{"schemaVersion":2,"services":[]}`, wantErr: ErrUnsupportedSchema, msg: "schema version 2, this build understands version 1"},
		"version 2 + new":  {in: `{"schemaVersion":2,"services":[],"rollout":{}}`, wantErr: ErrUnsupportedSchema},
		"version 0":        {in: `{"schemaVersion":0,"services":[]}`, wantErr: ErrUnsupportedSchema},
		"version string":   {in: `{"schemaVersion":"1","services":[]}`},
		"version float":    {in: `{"schemaVersion":1.5,"services":[]}`},
		"wrong type":       {in: `{"schemaVersion":1,"services":{}}`},
		"duplicate names":  {in: `{"schemaVersion":1,"services":[{"name":"a","release":{}},{"name":"a","release":{}}]}`, wantErr: ErrInvalid},
		"held and release": {in: `{"schemaVersion":1,"services":[{"name":"a","held":true,"heldReason":"r","release":{}}]}`, wantErr: ErrInvalid},
		"bad base64":       {in: `{"schemaVersion":1,"services":[{"name":"a","release":{},"variables":[{"name":"A","secret":{"dataKeyId":"k","ciphertext":"!!"}}]}]}`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in))
			require.Error(t, err)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			}
			if tt.msg != "" {
				require.ErrorContains(t, err, tt.msg)
			}
		})
	}
}

func TestDecodeAcceptsWhitespace(t *testing.T) {
	b := mustCanonical(t, sample())
	got, err := Decode(append(append([]byte("\n\t "), b...), "\r\n "...))
	require.NoError(t, err)
	require.Equal(t, sample(), got)
}

// jsonEncode writes d as plain encoding/json would, without normalising.
func jsonEncode(w io.Writer, d Document) error { return json.NewEncoder(w).Encode(d) }
