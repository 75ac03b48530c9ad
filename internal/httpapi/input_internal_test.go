package httpapi

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

// The API's bound of a variable's value is the domain's: a longer one is
// refused as the field, before it is sealed.
func TestVariableValueBoundIsTheDomains(t *testing.T) {
	f, ok := reflect.TypeFor[api.VariableInput]().FieldByName("Value")
	require.True(t, ok)
	rule := fieldRule(reflect.TypeFor[api.VariableInput](), f)
	require.Equal(t, domain.MaxVariableValue, rule.max)
	require.Equal(t, kindOpaque, rule.kind)
}

// The rules by kind of field, on decoded strings and on raw literals.
func TestStringRules(t *testing.T) {
	label, text, opaque := stringRule{kindLabel, 16}, stringRule{kindText, 16}, stringRule{kindOpaque, 16}
	for _, tc := range []struct {
		s    string
		rule stringRule
		ok   bool
	}{
		{"shop", label, true},
		{"Zoë Åström", label, true},
		{"עברית", label, true},
		{"a\x00", opaque, false},
		{"a\x01", opaque, true},
		{"a\u202eb", opaque, true},
		{"a\u202eb", text, true},
		{"a\u202eb", label, false},
		{"a\u2066b", label, false},
		{"a\nb\tc", text, true},
		{"a\nb", label, false},
		{"a\x1b[31m", text, false},
		{"a\u0085", label, false},
		{"a\x7f", label, false},
		{"a\xff", opaque, false},
		{"12345678901234567", opaque, false},
		{"1234567890123456", opaque, true},
	} {
		err := checkText("field x", tc.s, tc.rule)
		require.Equal(t, tc.ok, err == nil, "%q as %v: %v", tc.s, tc.rule, err)
	}
	for _, tc := range []struct {
		lit string
		ok  bool
	}{
		{`"plain"`, true},
		{`"\ud83d\ude00"`, true},
		{`"\ud83d"`, false},
		{`"\ude00"`, false},
		{`"\ud83dx"`, false},
		{`"\ud83d\u0041"`, false},
		{`"\\ud800"`, true},
		{"\"\xe2\x80\"", false},
		{`"\u00e9\n"`, true},
	} {
		err := checkLiteral("field x", []byte(tc.lit))
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.lit, err)
	}
}
