package webhooks_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/webhooks"
)

// The test vector of the Standard Webhooks reference libraries (and
// Svix's): secret, id, timestamp and body, and the signature they expect.
func TestSignatureMatchesTheSpecificationsVector(t *testing.T) {
	t.Parallel()
	key, err := webhooks.SecretKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	got := webhooks.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`), key)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got)

	other, err := webhooks.SecretKey("whsec_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	require.NoError(t, err)
	two := webhooks.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`), key, other)
	require.Regexp(t, `^v1,g0hM9SsE\+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,[A-Za-z0-9+/]{43}=$`, two)

	for _, bad := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_"} {
		_, err := webhooks.SecretKey(bad)
		require.Error(t, err, bad)
	}
}
