package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSafeNextStaysOnSite: the address a sign-in sends the browser on to
// never leaves the site, also when it hides a second slash or a backslash
// behind characters a browser drops from a URL (tab, newline), or is not
// a URL at all. The Location is read as a browser reads it: the WHATWG URL
// parser removes ASCII tabs and newlines anywhere and turns \ into /.
func TestSafeNextStaysOnSite(t *testing.T) {
	for _, next := range []string{
		"//evil.example", "/\\evil.example", "/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example",
		"\t//evil.example", "/\t\\evil.example", "https://evil.example/", "/%09/evil.example", "/\x00/evil.example",
		" //evil.example", "/signin?next=//evil.example",
	} {
		got := safeNext(next)
		rec := httptest.NewRecorder()
		http.Redirect(rec, httptest.NewRequest("POST", "/signin", nil), got, http.StatusSeeOther)
		loc := rec.Header().Get("Location")
		browser := strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(strings.TrimLeft(loc, " \x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f"))
		u, err := url.Parse(browser)
		require.NoError(t, err, "next %q gave Location %q", next, loc)
		require.Empty(t, u.Host, "next %q gave Location %q: off the site", next, loc)
		require.Empty(t, u.Scheme, "next %q gave Location %q: off the site", next, loc)
		require.True(t, strings.HasPrefix(browser, "/") && !strings.HasPrefix(browser, "//"), "next %q gave Location %q", next, loc)
	}
	// An ordinary page of the site is kept, with its query.
	require.Equal(t, "/o/acme/audit?actor=ada%40example.com", safeNext("/o/acme/audit?actor=ada%40example.com"))
	require.Equal(t, "/o/acme", safeNext("/o/acme"))
}
