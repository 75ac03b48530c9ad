package httpapi

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// holdsSecret reports whether values of t may show a secret: a string field
// whose JSON name is token, secret or password, at any depth.
func holdsSecret(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return false
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch strings.ToLower(name) {
		case "token", "secret", "password":
			if f.Type.Kind() == reflect.String {
				return true
			}
		}
		if holdsSecret(f.Type, seen) {
			return true
		}
	}
	return false
}

// Every response that shows a secret says which credentials it shows, so
// that an idempotent replay checks them first; and the routes that show
// secrets are the ones known to.
func TestResponsesWithSecretsNameTheirCredentials(t *testing.T) {
	var withSecrets []string
	for _, rt := range (&API{}).routeTable() {
		for _, body := range []any{rt.response, rt.accepted} {
			if body == nil || !holdsSecret(reflect.TypeOf(body), map[reflect.Type]bool{}) {
				continue
			}
			require.True(t, carriesSecrets(body), "%s %s answers with a secret (%T) but does not say which credential it is", rt.method, rt.path, body)
			if rt.creating || rt.public {
				withSecrets = append(withSecrets, rt.method+" "+rt.path)
			}
		}
	}
	require.ElementsMatch(t, []string{
		"POST /api/v1/setup", "POST /api/v1/sessions", "POST /api/v1/tokens",
		"POST /api/v1/orgs/{org}/clusters", "POST /api/v1/orgs/{org}/clusters/{cluster}/join-tokens",
	}, withSecrets, "TestNoSecretInTheDatabase covers each of these")
}
