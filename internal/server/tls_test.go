package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/server"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// Over TLS every answer carries Strict-Transport-Security; over plain HTTP
// none does (a browser ignores it there, and a proxy that terminates TLS
// sets its own).
func TestHSTSOnTheTLSListenerOnly(t *testing.T) {
	t.Parallel()
	certFile, keyFile, roots := selfSigned(t)
	k, _ := seal.GenerateMasterKey()
	cfg := config.Config{DatabaseURL: pgtest.URL(t), SecretKey: k, Listen: "127.0.0.1:0", PublicURL: "https://127.0.0.1",
		LogLevel: "warn", TLSCert: certFile, TLSKey: keyFile}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, cfg, server.Options{Version: "test", Ready: func(a string) { ready <- a }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not start")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	for _, path := range []string{"/api/v1/me", "/api/v1/openapi.json", "/healthz", "/"} {
		resp, err := hc.Get("https://" + addr + path)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"), path)
	}

	plain, err := start(t, config.Config{DatabaseURL: pgtest.URL(t), SecretKey: k})
	require.NoError(t, err)
	for _, path := range []string{"/api/v1/me", "/healthz"} {
		resp, err := http.Get(plain.url + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Empty(t, resp.Header.Get("Strict-Transport-Security"), path)
	}
}
