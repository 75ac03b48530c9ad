package seal

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// EnvKey names the environment variable that carries the master key. Errors
// name the variable rather than the value, so they are safe to print.
const EnvKey = "NEBULACTRL_SECRET_KEY"

// EnvPreviousKey names the environment variable that carries the previous
// master key while it is rotated away: data keys it wraps still open, new
// ones are wrapped by EnvKey's, and nebula secret-key rotate re-wraps the
// rest.
const EnvPreviousKey = "NEBULACTRL_PREVIOUS_SECRET_KEY"

// ErrInvalidMasterKey marks a master key that ParseMasterKey refuses: not
// base64, not 32 bytes, or too regular to have come from a random source.
var ErrInvalidMasterKey = errors.New("invalid master key")

const (
	masterKeySize = 32
	// minDistinctBytes is far below what 32 random bytes give (about 30 on
	// average; fewer than 16 has odds around 2^-90), so only a made-up key
	// trips it.
	minDistinctBytes = 16
	// idPrefix separates the key id hash from any other hash of the key, so
	// the published id says nothing usable about the key.
	idPrefix = "nebulactrl/seal/master-key-id/v1\x00"
)

// MasterKey is the key that wraps every data key. It is only built by
// ParseMasterKey, and prints as its id whatever the verb, so that a stray log
// line or %#v of a config struct never leaks it.
type MasterKey struct {
	// key is behind a pointer because fmt prints a nested unexported field
	// by reflection, without calling Format: a pointer then prints as an
	// address rather than as the 32 key bytes.
	key *[masterKeySize]byte
	id  string
}

// ParseMasterKey decodes the value of NEBULACTRL_SECRET_KEY: base64 (standard
// or URL alphabet, padded or not) of exactly 32 random bytes. Errors wrap
// ErrInvalidMasterKey and never include the value.
func ParseMasterKey(s string) (MasterKey, error) { return ParseMasterKeyOf(EnvKey, s) }

// ParseMasterKeyOf is ParseMasterKey for the key of another variable
// (EnvPreviousKey): errors name that variable.
func ParseMasterKeyOf(name, s string) (MasterKey, error) {
	// A trailing newline from `echo` or a secrets file is not part of the key.
	s = strings.TrimSpace(s)
	if s == "" {
		return MasterKey{}, fmt.Errorf("%w: %s is empty; generate one with GenerateMasterKey", ErrInvalidMasterKey, name)
	}
	raw, ok := decodeBase64(s)
	if !ok {
		return MasterKey{}, fmt.Errorf("%w: %s is not base64 (%d characters)", ErrInvalidMasterKey, name, len(s))
	}
	defer clear(raw)
	if len(raw) != masterKeySize {
		return MasterKey{}, fmt.Errorf("%w: %s decodes to %d bytes, want %d", ErrInvalidMasterKey, name, len(raw), masterKeySize)
	}
	if why := weakness(raw); why != "" {
		return MasterKey{}, fmt.Errorf("%w: %s is too weak (%s); generate a random one with GenerateMasterKey", ErrInvalidMasterKey, name, why)
	}
	k := new([masterKeySize]byte)
	copy(k[:], raw)
	return MasterKey{key: k, id: keyID(k)}, nil
}

// GenerateMasterKey returns a new random master key, encoded as
// NEBULACTRL_SECRET_KEY expects it (standard base64, padded).
func GenerateMasterKey() (string, error) {
	var raw [masterKeySize]byte
	defer clear(raw[:])
	// weakness of 32 random bytes is astronomically unlikely; looping keeps
	// the promise that a generated key always parses.
	for {
		if _, err := rand.Read(raw[:]); err != nil {
			return "", fmt.Errorf("reading random bytes for a master key: %w", err)
		}
		if weakness(raw[:]) == "" {
			return base64.StdEncoding.EncodeToString(raw[:]), nil
		}
	}
}

func decodeBase64(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding,
		base64.URLEncoding, base64.RawURLEncoding,
	} {
		// Strict: a key with stray trailing bits is a typo, not a key.
		if raw, err := enc.Strict().DecodeString(s); err == nil {
			return raw, true
		}
	}
	return nil, false
}

// weakness says why a key looks made up rather than random, or "" if it
// does not. Each test refuses a random key with odds below 2^-45 (the
// printable-text test; the others far below), so the keys refused are ones
// a person or a bug produced.
func weakness(k []byte) string {
	var seen [256]bool
	distinct := 0
	printable := true
	for _, b := range k {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
		if b < 0x20 || b > 0x7e {
			printable = false
		}
	}
	switch {
	case distinct == 1:
		return "every byte is the same"
	case distinct < minDistinctBytes:
		return fmt.Sprintf("only %d distinct byte values, want at least %d", distinct, minDistinctBytes)
	case printable:
		// A password or hex string base64-encoded: typed, not random.
		return "every byte is printable text"
	case isProgression(k):
		return "the bytes form a counting sequence"
	}
	// A short block repeated: "abcd...abcd...". Periods above half the key
	// would leave too few repeated bytes to mean anything.
	for p := 2; p <= len(k)/2; p++ {
		if hasPeriod(k, p) {
			return fmt.Sprintf("the bytes repeat every %d", p)
		}
	}
	return ""
}

// isProgression reports whether each byte is the previous one plus a
// constant (mod 256), such as 0, 1, 2, ... or 255, 254, ...
func isProgression(k []byte) bool {
	step := k[1] - k[0]
	for i := 2; i < len(k); i++ {
		if k[i]-k[i-1] != step {
			return false
		}
	}
	return true
}

func hasPeriod(k []byte, p int) bool {
	for i := p; i < len(k); i++ {
		if k[i] != k[i-p] {
			return false
		}
	}
	return true
}

func keyID(k *[masterKeySize]byte) string {
	h := sha256.New()
	h.Write([]byte(idPrefix))
	h.Write(k[:])
	return "mk_" + hex.EncodeToString(h.Sum(nil))[:16]
}

// ID returns the public id of the key: "mk_" and 16 hex digits. It is stored
// beside every data key so that a wrong key is named, not just refused.
// The zero MasterKey has id "".
func (k MasterKey) ID() string { return k.id }

// IsZero reports whether k is the zero MasterKey, which wraps nothing.
func (k MasterKey) IsZero() bool { return k.key == nil }

// Equal reports whether two master keys are the same key.
func (k MasterKey) Equal(o MasterKey) bool {
	if k.key == nil || o.key == nil {
		return k.key == o.key
	}
	return subtle.ConstantTimeCompare(k.key[:], o.key[:]) == 1
}

// String returns the key id, never the key.
func (k MasterKey) String() string {
	if k.key == nil {
		return "mk_none"
	}
	return k.id
}

// GoString returns the key id in Go syntax, never the key.
func (k MasterKey) GoString() string { return fmt.Sprintf("seal.MasterKey{id: %q}", k.String()) }

// Format prints the key id for every verb, so %x or %v cannot reach the key
// bytes; fmt calls it in preference to String and GoString.
func (k MasterKey) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, k.GoString())
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), k.String())
}

// LogValue logs the key id, so slog.Any("key", k) is safe with any handler.
func (k MasterKey) LogValue() slog.Value { return slog.StringValue(k.String()) }
