package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A run of one benchmark replaces its rows and keeps every other row and
// the notes below the table; a full run writes only what it measured.
func TestReportKeepsRowsNotMeasuredAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	first := []result{
		{name: "appends", measured: "1", verdict: "met", when: "2026-12-01 10:00 UTC, load 0.5–0.7, 1m0s"},
		{name: "rebuild", measured: "2", verdict: "not met", when: "2026-12-01 10:01 UTC, load 0.6–0.9, 2m0s"},
	}
	if err := write(path, first, "pg 15", "", false, time.Minute); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), "## What each row measures", "## What each row measures\n\nA note written by hand.", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	again := []result{{name: "rebuild", measured: "3", verdict: "met", when: "2026-12-02 11:00 UTC, load 1.0–1.2, 2m0s"}}
	if err := write(path, again, "pg 15", "rebuild", false, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	text := string(got)
	for _, want := range []string{
		"| appends | 1 |  |  |  | met | 2026-12-01 10:00 UTC, load 0.5–0.7, 1m0s |",
		"| rebuild | 3 |  |  |  | met | 2026-12-02 11:00 UTC, load 1.0–1.2, 2m0s |",
		"A note written by hand.",
		"Last run: ",
		"`-only rebuild`",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "| rebuild | 2 |") || strings.Count(text, "| rebuild |") != 1 {
		t.Errorf("the rebuild row was not replaced:\n%s", text)
	}
	if strings.Index(text, "| appends |") > strings.Index(text, "| rebuild |") {
		t.Errorf("the rows changed order:\n%s", text)
	}

	// A full run in which a benchmark failed keeps the rows it did not
	// measure (the failed one's), and says so.
	if err := write(path, again, "pg 15", "", true, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(path)
	if !strings.Contains(string(got), "| appends | 1 |") || !strings.Contains(string(got), "some failed") {
		t.Errorf("a full run with a failed benchmark dropped its earlier row or did not say so:\n%s", got)
	}

	// A full run drops rows it no longer has.
	if err := write(path, again, "pg 15", "", false, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(path)
	if strings.Contains(string(got), "| appends |") {
		t.Errorf("a full run kept a row it did not measure:\n%s", got)
	}
}
