// Package credential makes and checks the bearer secrets of NebulaCtrl: API
// tokens, cluster join tokens and server credentials all read
// nbl_<id>_<secret>. The id finds the stored row; only a SHA-256 of the
// secret is stored (the secret is random and long, so a fast hash is the
// right one) and it is compared in constant time.
package credential

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

const prefix = "nbl_"

// New makes a credential: its id, the string handed out once, and the hash to store.
func New() (id, token, hash string, err error) {
	u := uuid.New()
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", "", "", err
	}
	s := base64.RawURLEncoding.EncodeToString(secret)
	return u.String(), prefix + hex.EncodeToString(u[:]) + "_" + s, Hash(s), nil
}

// Hash is the stored form of a secret.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Parse splits a credential into its id and secret.
func Parse(token string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(token), prefix)
	if !ok {
		return "", "", false
	}
	hexID, secret, ok := strings.Cut(rest, "_")
	if !ok || len(hexID) != 32 || len(secret) < 32 || len(secret) > 64 {
		return "", "", false
	}
	raw, err := hex.DecodeString(hexID)
	if err != nil {
		return "", "", false
	}
	u, err := uuid.FromBytes(raw)
	if err != nil {
		return "", "", false
	}
	return u.String(), secret, true
}

// Matches compares a secret with a stored hash in constant time.
func Matches(storedHash, secret string) bool {
	return subtle.ConstantTimeCompare([]byte(storedHash), []byte(Hash(secret))) == 1
}
