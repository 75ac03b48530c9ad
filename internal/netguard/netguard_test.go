package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/netguard"
)

func TestRefusal(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "::1": "loopback", "169.254.169.254": "metadata", "fd00:ec2::254": "metadata",
		"169.254.10.1": "link-local", "fe80::1": "link-local", "0.0.0.0": "unspecified", "224.0.0.1": "multicast",
		"::ffff:127.0.0.1": "loopback", "10.0.0.1": "", "93.184.216.34": "",
	} {
		got := netguard.Refusal(netip.MustParseAddr(addr), false)
		if want == "" {
			require.Empty(t, got, addr)
			continue
		}
		require.Contains(t, got, want, addr)
	}
	require.Contains(t, netguard.Refusal(netip.MustParseAddr("10.0.0.1"), true), "private")
	require.True(t, netguard.IsMetadataName("Metadata.Google.Internal."))
}

// A loopback receiver is refused at dial time unless listed by host:port;
// the error says what was refused and why.
func TestGuardDialsOnlyWhatThePolicyAllows(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	host := srv.Listener.Addr().String()

	g := netguard.New(netguard.NewHostList(), false, nil)
	_, err := g.DialContext(context.Background(), "tcp", host)
	require.ErrorIs(t, err, netguard.ErrRefused)
	var re *netguard.RefusedError
	require.True(t, errors.As(err, &re))
	require.Equal(t, host, re.Addr)
	require.Contains(t, err.Error(), "127.0.0.1 is a loopback address")
	_, err = g.DialContext(context.Background(), "tcp", "metadata.google.internal:80")
	require.ErrorIs(t, err, netguard.ErrRefused)
	require.Contains(t, err.Error(), "cloud metadata service")

	listed := netguard.New(netguard.NewHostList([]string{host}), false, nil)
	require.True(t, listed.Listed(host))
	conn, err := listed.DialContext(context.Background(), "tcp", host)
	require.NoError(t, err)
	conn.Close()
	_, port, _ := net.SplitHostPort(host)
	require.False(t, listed.Listed("127.0.0.1:1"+port), "another port of a listed host:port is not listed")
}
