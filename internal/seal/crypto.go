package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

// Formats, both nonce first:
//
//	wrapped data key: 12-byte nonce | AES-256-GCM(master key, data key, AAD = data key id)
//	sealed value:     24-byte nonce | XChaCha20-Poly1305(data key, plaintext, AAD = data key id)
//
// Binding both to the data key id means a wrapped key cannot be copied onto
// another data_keys row and a ciphertext cannot be pointed at another data
// key: either fails authentication instead of opening under the wrong name.
const (
	dataKeySize    = 32
	gcmNonceSize   = 12
	gcmTagSize     = 16
	wrappedKeySize = gcmNonceSize + dataKeySize + gcmTagSize
	minSealedSize  = chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead
)

func masterAEAD(k MasterKey) (cipher.AEAD, error) {
	block, err := aes.NewCipher(k.key[:])
	if err != nil {
		return nil, fmt.Errorf("creating AES cipher: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("creating AES-GCM: %w", err)
	}
	return gcm, nil
}

// wrapKey encrypts a data key with the master key.
func wrapKey(k MasterKey, dataKey []byte, dataKeyID string) ([]byte, error) {
	gcm, err := masterAEAD(k)
	if err != nil {
		return nil, err
	}
	out := make([]byte, gcmNonceSize, wrappedKeySize)
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("reading random nonce: %w", err)
	}
	return gcm.Seal(out, out, dataKey, []byte(dataKeyID)), nil
}

// unwrapKey decrypts a data key and returns the AEAD that seals values with
// it, so the raw key bytes live only as long as this call.
func unwrapKey(k MasterKey, wrapped []byte, dataKeyID string) (cipher.AEAD, error) {
	dk, err := unwrapRaw(k, wrapped, dataKeyID)
	if err != nil {
		return nil, err
	}
	defer clear(dk)
	return valueAEAD(dk)
}

// unwrapRaw decrypts a data key; the caller clears the result.
func unwrapRaw(k MasterKey, wrapped []byte, dataKeyID string) ([]byte, error) {
	if k.IsZero() {
		return nil, errors.New("no master key")
	}
	if len(wrapped) != wrappedKeySize {
		return nil, fmt.Errorf("wrapped key is %d bytes, want %d", len(wrapped), wrappedKeySize)
	}
	gcm, err := masterAEAD(k)
	if err != nil {
		return nil, err
	}
	dk, err := gcm.Open(nil, wrapped[:gcmNonceSize], wrapped[gcmNonceSize:], []byte(dataKeyID))
	if err != nil {
		// cipher's error says only "message authentication failed".
		return nil, fmt.Errorf("unwrapping: %w", err)
	}
	return dk, nil
}

func valueAEAD(dataKey []byte) (cipher.AEAD, error) {
	// NewX copies the key, so the caller may clear its slice.
	aead, err := chacha20poly1305.NewX(dataKey)
	if err != nil {
		return nil, fmt.Errorf("creating XChaCha20-Poly1305: %w", err)
	}
	return aead, nil
}

func sealValue(aead cipher.AEAD, dataKeyID string, plaintext []byte) ([]byte, error) {
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("reading random nonce: %w", err)
	}
	return aead.Seal(out, out, plaintext, []byte(dataKeyID)), nil
}

func openValue(aead cipher.AEAD, dataKeyID string, sealed []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(sealed) < n+aead.Overhead() {
		return nil, fmt.Errorf("ciphertext is %d bytes, shorter than nonce and tag", len(sealed))
	}
	return aead.Open(nil, sealed[:n], sealed[n:], []byte(dataKeyID))
}
