package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// SecretPrefix starts every endpoint secret: whsec_ and the key in base64.
const SecretPrefix = "whsec_"

// SecretKey is the HMAC key of a secret: the base64-decoded bytes after
// whsec_, as the Standard Webhooks specification says.
func SecretKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("a webhook secret starts with %s", SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("a webhook secret is %s and base64: %w", SecretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("a webhook secret has a key after %s", SecretPrefix)
	}
	return key, nil
}

// Sign is the webhook-signature header of a message: "v1,<base64 of
// HMAC-SHA256 of id.timestamp.body>" for each key, space-separated (two
// during a rotation's overlap).
func Sign(id string, timestamp int64, body []byte, keys ...[]byte) string {
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
		mac.Write([]byte{'.'})
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}
