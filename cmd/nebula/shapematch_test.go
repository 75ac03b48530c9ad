package main

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A golden shape (testdata/json/<command>.txt) is one line per path with
// its types, as shapeOf writes them. A line ending in " ?" names an
// optional path: a field that is present or absent depending on timing or
// state (a deployment's finishedAt, supersededBy; the elements of a list
// that may be empty), so that the golden does not depend on how fast the
// machine ran the test. Paths below an optional path may be absent when it
// is.
//
// A printed shape matches its golden when every path it has is in the
// golden with only the golden's types, and every path of the golden that is
// not optional is printed. -update keeps the optional lines (and their
// markers) of the golden it rewrites.

type shapeLine struct {
	types    map[string]bool
	optional bool
}

// parseShape reads a shape, golden (with markers) or printed.
func parseShape(s string) map[string]shapeLine {
	out := map[string]shapeLine{}
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		optional := false
		if rest, ok := strings.CutSuffix(l, " ?"); ok {
			l, optional = rest, true
		}
		path, types, _ := strings.Cut(l, " ")
		set := map[string]bool{}
		for _, t := range strings.Split(types, "|") {
			set[t] = true
		}
		out[path] = shapeLine{types: set, optional: optional}
	}
	return out
}

// mayBeAbsent reports whether a golden path may be missing from a printed
// shape: it is optional, or below an optional path that was not printed.
func mayBeAbsent(golden, printed map[string]shapeLine, path string) bool {
	for p, l := range golden {
		if !l.optional {
			continue
		}
		if path == p {
			return true
		}
		_, shown := printed[p]
		if !shown && (strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[]")) {
			return true
		}
	}
	return false
}

// shapeMismatches lists how a printed shape breaks its golden; none when
// it matches.
func shapeMismatches(golden, printed string) []string {
	want, got := parseShape(golden), parseShape(printed)
	var out []string
	for path, g := range got {
		w, ok := want[path]
		if !ok {
			out = append(out, fmt.Sprintf("%s: printed, not in the golden", path))
			continue
		}
		for t := range g.types {
			if !w.types[t] {
				out = append(out, fmt.Sprintf("%s: printed as %s, the golden says %s", path, t, joinTypes(w.types)))
			}
		}
	}
	for path := range want {
		if _, ok := got[path]; !ok && !mayBeAbsent(want, got, path) {
			out = append(out, fmt.Sprintf("%s: in the golden (not optional), not printed", path))
		}
	}
	sort.Strings(out)
	return out
}

// mergeShape is what -update writes: the printed shape, with the golden's
// optional lines kept (marked, their types merged with the printed ones).
func mergeShape(golden, printed string) string {
	want, got := parseShape(golden), parseShape(printed)
	for path, w := range want {
		if !w.optional {
			continue
		}
		g, ok := got[path]
		if !ok {
			got[path] = w
			continue
		}
		for t := range w.types {
			g.types[t] = true
		}
		g.optional = true
		got[path] = g
	}
	var lines []string
	for path, l := range got {
		line := path + " " + joinTypes(l.types)
		if l.optional {
			line += " ?"
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func joinTypes(set map[string]bool) string {
	var names []string
	for t := range set {
		names = append(names, t)
	}
	sort.Strings(names)
	return strings.Join(names, "|")
}

func TestShapeMatching(t *testing.T) {
	golden := "$ array\n$[] object ?\n$[].id string\n$[].finishedAt time ?\n$[].blockers array\n$[].blockers[] string ?\n"
	// Present or absent, the optional paths match; so does an empty list.
	require.Empty(t, shapeMismatches(golden, "$ array\n$[] object\n$[].id string\n$[].blockers array\n"))
	require.Empty(t, shapeMismatches(golden, "$ array\n$[] object\n$[].id string\n$[].finishedAt time\n$[].blockers array\n$[].blockers[] string\n"))
	require.Empty(t, shapeMismatches(golden, "$ array\n"))
	// A required path missing, a new path, a new type: each is reported.
	require.Equal(t, []string{"$[].id: in the golden (not optional), not printed"},
		shapeMismatches(golden, "$ array\n$[] object\n$[].blockers array\n"))
	require.Equal(t, []string{"$[].extra: printed, not in the golden"},
		shapeMismatches(golden, "$ array\n$[] object\n$[].id string\n$[].blockers array\n$[].extra bool\n"))
	require.Equal(t, []string{"$[].finishedAt: printed as null, the golden says time"},
		shapeMismatches(golden, "$ array\n$[] object\n$[].id string\n$[].blockers array\n$[].finishedAt null\n"))
	// -update keeps the optional lines the run did not print.
	require.Equal(t, "$ array\n$[] object ?\n$[].blockers array\n$[].blockers[] string ?\n$[].finishedAt time ?\n$[].id string\n",
		mergeShape(golden, "$ array\n$[] object\n$[].id string\n$[].blockers array\n"))
}
