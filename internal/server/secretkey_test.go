package server_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// The keys of a rotation as serve takes them (issue 17, item 5): both keys
// start a control plane; after the rotation the old key alone, or as the
// current key, is refused at start with an error naming the new key; a
// previous key without a current one, or equal to it, is refused too.
func TestServeWithTheKeysOfARotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	gen := func() (string, seal.MasterKey) {
		s, err := seal.GenerateMasterKey()
		require.NoError(t, err)
		k, err := seal.ParseMasterKey(s)
		require.NoError(t, err)
		return s, k
	}
	oldEnc, oldKey := gen()
	newEnc, newKey := gen()
	_, err = seal.New(pool, oldKey, nil).Seal(ctx, "", []byte("hunter2"))
	require.NoError(t, err)

	// Both keys, before and after the rotation: the control plane starts.
	r, err := start(t, config.Config{DatabaseURL: url, SecretKey: newEnc, PreviousSecretKey: oldEnc})
	require.NoError(t, err)
	require.NoError(t, r.stop())
	_, err = seal.Rotate(ctx, pool, oldKey, newKey)
	require.NoError(t, err)
	r, err = start(t, config.Config{DatabaseURL: url, SecretKey: newEnc, PreviousSecretKey: oldEnc})
	require.NoError(t, err)
	require.NoError(t, r.stop())

	for name, cfg := range map[string]config.Config{
		"the old key alone":        {SecretKey: oldEnc},
		"the old key as current":   {SecretKey: oldEnc, PreviousSecretKey: newEnc},
		"a previous key alone":     {PreviousSecretKey: oldEnc},
		"the same key twice":       {SecretKey: newEnc, PreviousSecretKey: newEnc},
		"a malformed previous key": {SecretKey: newEnc, PreviousSecretKey: "short"},
	} {
		cfg.DatabaseURL = url
		_, err := start(t, cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), oldEnc, name)
		require.NotContains(t, err.Error(), newEnc, name)
		switch name {
		case "the old key alone", "the old key as current":
			require.ErrorIs(t, err, seal.ErrRetiredKey, name)
			require.ErrorContains(t, err, oldKey.ID(), name)
			require.ErrorContains(t, err, "replaced by "+newKey.ID(), name)
		default:
			require.ErrorContains(t, err, "NEBULACTRL_PREVIOUS_SECRET_KEY", name)
		}
	}

	// The new key alone, once the rotation is finished.
	r, err = start(t, config.Config{DatabaseURL: url, SecretKey: newEnc})
	require.NoError(t, err)
	require.NoError(t, r.stop())
}
