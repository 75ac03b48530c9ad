package compiler

import (
	"testing"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/stretchr/testify/require"
)

const dbHost = "db.acme-shop-production.svc.cluster.local"

func sealedAs(name, dataKey string) *desiredstate.Sealed {
	return &desiredstate.Sealed{DataKeyID: dataKey, Ciphertext: []byte("sealed:" + name)}
}

// TestVariables covers every resolution rule. The service under test is
// always "api"; held reasons are asserted exactly because users read them.
func TestVariables(t *testing.T) {
	dbRel := release("db")
	tests := []struct {
		name       string
		services   []Service
		unreadable []string
		want       []desiredstate.Variable // api's variables when not held
		held       string
	}{
		{
			name:     "plain values as they are",
			services: []Service{deployed("api", release("api", plain("B", "2"), plain("A", "a < b & c"), plain("EMPTY", "")))},
			want:     []desiredstate.Variable{{Name: "A", Value: "a < b & c"}, {Name: "B", Value: "2"}, {Name: "EMPTY"}},
		},
		{
			name:     "own secret copied sealed",
			services: []Service{deployed("api", release("api", secret("DB_PASSWORD", "dk_1")))},
			want:     []desiredstate.Variable{{Name: "DB_PASSWORD", Secret: sealedAs("DB_PASSWORD", "dk_1")}},
		},
		{
			name:       "own secret unreadable",
			services:   []Service{deployed("api", release("api", secret("DB_PASSWORD", "dk_old"), plain("A", "1")))},
			unreadable: []string{"dk_old"},
			held:       "secret DB_PASSWORD cannot be unsealed with the current master key",
		},
		{
			name:       "another data key unreadable does not matter",
			services:   []Service{deployed("api", release("api", secret("DB_PASSWORD", "dk_1")))},
			unreadable: []string{"dk_old"},
			want:       []desiredstate.Variable{{Name: "DB_PASSWORD", Secret: sealedAs("DB_PASSWORD", "dk_1")}},
		},
		{
			name: "references resolved against live variables",
			services: []Service{
				deployed("api", release("api", plain("DATABASE_URL", "postgres://${{ db.USER }}@${{db.HOST}}:${{ db.PORT }}/app"))),
				deployed("db", dbRel, plain("USER", "shop")),
			},
			want: []desiredstate.Variable{{Name: "DATABASE_URL", Value: "postgres://shop@" + dbHost + ":8080/app"}},
		},
		{
			name: "live value wins over the value frozen in the referenced release",
			services: []Service{
				deployed("api", release("api", plain("U", "${{ db.USER }}"))),
				deployed("db", release("db", plain("USER", "frozen")), plain("USER", "live")),
			},
			want: []desiredstate.Variable{{Name: "U", Value: "live"}},
		},
		{
			name:     "referenced service does not exist",
			services: []Service{deployed("api", release("api", plain("DATABASE_URL", "${{ db.URL }}")))},
			held:     `variable DATABASE_URL references service "db", which does not exist`,
		},
		{
			name:     "referenced service was deleted",
			services: []Service{deployed("api", release("api", plain("DATABASE_URL", "${{ db.URL }}"))), deleted("db", plain("URL", "x"))},
			held:     `variable DATABASE_URL references service "db", which was deleted`,
		},
		{
			name: "deleted and recreated: the live one is meant",
			services: []Service{
				deployed("api", release("api", plain("DATABASE_URL", "${{ db.URL }}"))),
				deleted("db", plain("URL", "old")), deployed("db", dbRel, plain("URL", "new")),
			},
			want: []desiredstate.Variable{{Name: "DATABASE_URL", Value: "new"}},
		},
		{
			name:     "referenced variable not set",
			services: []Service{deployed("api", release("api", plain("DATABASE_URL", "${{ db.PORT }}:${{ db.USER }}"))), deployed("db", dbRel)},
			held:     "variable DATABASE_URL references db.USER, which is not set",
		},
		{
			name:     "an empty value is set",
			services: []Service{deployed("api", release("api", plain("X", "<${{ db.EMPTY }}>"))), deployed("db", dbRel, plain("EMPTY", ""))},
			want:     []desiredstate.Variable{{Name: "X", Value: "<>"}},
		},
		{
			name:     "HOST and PORT set by the service win over built-ins",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.HOST }}:${{ db.PORT }}"))), deployed("db", dbRel, plain("HOST", "db.internal"), plain("PORT", "5432"))},
			want:     []desiredstate.Variable{{Name: "X", Value: "db.internal:5432"}},
		},
		{
			name:     "HOST of a service not deployed here",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.HOST }}"))), notDeployed("db")},
			want:     []desiredstate.Variable{{Name: "X", Value: dbHost}},
		},
		{
			name:     "PORT of a service not deployed here is not set",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.PORT }}"))), notDeployed("db")},
			held:     "variable X references db.PORT, which is not set",
		},
		{
			name: "PORT prefers the web process",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.PORT }}"))),
				deployed("db", &Release{ID: "r", Number: 1, Processes: []domain.Process{{Name: "admin", Port: 9000}, {Name: "web", Port: 5432}}})},
			want: []desiredstate.Variable{{Name: "X", Value: "5432"}},
		},
		{
			name: "PORT without web: first process by name with a port",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.PORT }}"))),
				deployed("db", &Release{ID: "r", Number: 1, Processes: []domain.Process{{Name: "c", Port: 7000}, {Name: "a"}, {Name: "web"}, {Name: "b", Port: 6000}}})},
			want: []desiredstate.Variable{{Name: "X", Value: "6000"}},
		},
		{
			name: "PORT without any port is not set",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.PORT }}"))),
				deployed("db", &Release{ID: "r", Number: 1, Processes: []domain.Process{worker()}})},
			held: "variable X references db.PORT, which is not set",
		},
		{
			name:     "only HOST and PORT are built in",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.NAME }}"))), deployed("db", dbRel)},
			held:     "variable X references db.NAME, which is not set",
		},
		{
			name:     "secret referenced as the whole value travels sealed",
			services: []Service{deployed("api", release("api", plain("DB_PASSWORD", "${{db.PASSWORD}}"))), deployed("db", dbRel, secret("PASSWORD", "dk_1"))},
			want:     []desiredstate.Variable{{Name: "DB_PASSWORD", Secret: sealedAs("PASSWORD", "dk_1")}},
		},
		{
			name:       "secret referenced but unreadable",
			services:   []Service{deployed("api", release("api", plain("DB_PASSWORD", "${{ db.PASSWORD }}"))), deployed("db", dbRel, secret("PASSWORD", "dk_old"))},
			unreadable: []string{"dk_old"},
			held:       "variable DB_PASSWORD references secret db.PASSWORD, which cannot be unsealed with the current master key",
		},
		{
			name:     "secret embedded in a larger value",
			services: []Service{deployed("api", release("api", plain("DATABASE_URL", "postgres://shop:${{ db.PASSWORD }}@db/app"))), deployed("db", dbRel, secret("PASSWORD", "dk_1"))},
			held:     "variable DATABASE_URL embeds secret db.PASSWORD in a larger value; a secret can only be referenced as the whole value",
		},
		{
			name:     "secret next to another reference is embedded too",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.USER }}${{ db.PASSWORD }}"))), deployed("db", dbRel, plain("USER", "u"), secret("PASSWORD", "dk_1"))},
			held:     "variable X embeds secret db.PASSWORD in a larger value; a secret can only be referenced as the whole value",
		},
		{
			name:     "white space around the reference counts as a larger value",
			services: []Service{deployed("api", release("api", plain("X", " ${{ db.PASSWORD }}"))), deployed("db", dbRel, secret("PASSWORD", "dk_1"))},
			held:     "variable X embeds secret db.PASSWORD in a larger value; a secret can only be referenced as the whole value",
		},
		{
			name:     "chained references are not resolved",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.URL }}"))), deployed("db", dbRel, plain("URL", "${{ cache.HOST }}")), deployed("cache", release("cache"))},
			held:     "variable X references db.URL, which itself contains references; chained references are not supported",
		},
		{
			name:     "a malformed reference in the referenced value counts as chained",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.URL }}"))), deployed("db", dbRel, plain("URL", "a ${{ b"))},
			held:     "variable X references db.URL, which itself contains references; chained references are not supported",
		},
		{
			name:     "self reference resolves against own live variables",
			services: []Service{deployed("api", release("api", plain("URL", "http://${{ api.HOST }}:${{ api.PORT }}${{ api.PREFIX }}")), plain("PREFIX", "/v2"))},
			want:     []desiredstate.Variable{{Name: "URL", Value: "http://api.acme-shop-production.svc.cluster.local:8080/v2"}},
		},
		{
			name:     "self reference to a variable of the same name is not a loop",
			services: []Service{deployed("api", release("api", plain("URL", "${{ api.URL }}")), plain("URL", "live"))},
			want:     []desiredstate.Variable{{Name: "URL", Value: "live"}},
		},
		{
			name:     "referenced variable set twice is ambiguous",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.USER }}"))), deployed("db", dbRel, plain("USER", "a"), plain("USER", "b"))},
			held:     "variable X references db.USER, which is set more than once",
		},
		{
			name: "referenced name used by two live services is ambiguous",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.USER }}"))),
				notDeployed("db", plain("USER", "a")), {ID: "svc_db2", Name: "db", Variables: []domain.Variable{plain("USER", "b")}}},
			held: `variable X references service "db", whose name is used by more than one service`,
		},
		{
			name:     "malformed reference in the frozen value",
			services: []Service{deployed("api", release("api", plain("X", "${{ db }}")))},
			held:     `variable X: reference "${{ db }}" must look like ${{ service.VARIABLE }}`,
		},
		{
			name:     "secret with a plain value as well",
			services: []Service{deployed("api", release("api", domain.Variable{Name: "X", Value: "v", Secret: &domain.SealedValue{DataKeyID: "k", Ciphertext: []byte{1}}}))},
			held:     "variable X has both a value and a secret",
		},
		{
			name:     "incomplete secret",
			services: []Service{deployed("api", release("api", domain.Variable{Name: "X", Secret: &domain.SealedValue{DataKeyID: "k"}}))},
			held:     "variable X is a secret without a data key or ciphertext",
		},
		{
			name:     "referenced secret incomplete",
			services: []Service{deployed("api", release("api", plain("X", "${{ db.P }}"))), deployed("db", dbRel, domain.Variable{Name: "P", Secret: &domain.SealedValue{Ciphertext: []byte{1}}})},
			held:     "variable X references db.P, which is a secret without a data key or ciphertext",
		},
		{
			name:     "variable set twice in the release",
			services: []Service{deployed("api", release("api", plain("X", "1"), plain("X", "2")))},
			held:     "release 1 has more than one variable named X",
		},
		{
			name: "first reason in variable-name order",
			services: []Service{deployed("api", release("api",
				plain("Z_URL", "${{ gone.URL }}"), secret("M_SECRET", "dk_old"), plain("A_URL", "${{ db.URL }}"))), deleted("db")},
			unreadable: []string{"dk_old"},
			held:       `variable A_URL references service "db", which was deleted`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snapshot(tt.services...)
			s.Unreadable = map[string]bool{}
			for _, k := range tt.unreadable {
				s.Unreadable[k] = true
			}
			d := Compile(s)
			requireWellFormed(t, d)
			api := service(t, d, "api")
			if tt.held != "" {
				require.True(t, api.Held, "api should be held")
				require.Equal(t, tt.held, api.HeldReason)
				return
			}
			require.False(t, api.Held, "api is held: %s", api.HeldReason)
			require.Equal(t, tt.want, api.Variables)
		})
	}
}
