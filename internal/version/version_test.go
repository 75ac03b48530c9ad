package version

import "testing"

func TestRelease(t *testing.T) {
	for v, want := range map[string]bool{
		"1.5.0": true, "v1.5.0": true, "0.0.1": true, "10.20.30": true,
		"dev": false, "": false, "1.4.0-3-gabc1234": false, "1.5.0-rc.1": false,
		"1.5.0+build.5": false, "1.5": false, "1": false, "01.5.0": false, "1.5.0.0": false, " 1.5.0": false,
	} {
		if got := Release(v); got != want {
			t.Errorf("Release(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestCompare(t *testing.T) {
	cases := []struct {
		a, b string
		want int
		ok   bool
	}{
		{"1.4.0", "1.5.0", -1, true},
		{"1.5.0", "1.5.0", 0, true},
		{"v1.5.0", "1.5.0", 0, true},
		{"1.10.0", "1.9.9", 1, true}, // numeric, not lexical
		{"2.0.0", "1.99.99", 1, true},
		{"dev", "1.5.0", 0, false},
		{"1.5.0", "dev", 0, false},
		{"1.4.0-3-gabc1234", "1.5.0", 0, false},
		{"1.5.0", "1.5.0-rc.1", 0, false},
	}
	for _, c := range cases {
		got, ok := Compare(c.a, c.b)
		if got != c.want || ok != c.ok {
			t.Errorf("Compare(%q, %q) = %d, %v; want %d, %v", c.a, c.b, got, ok, c.want, c.ok)
		}
	}
}

func TestSkew(t *testing.T) {
	cases := []struct{ agent, cp, want string }{
		{"1.4.0", "1.5.0", "Behind 1.5.0"},
		{"1.4.9", "v1.5.0", "Behind 1.5.0"},
		{"1.6.0", "1.5.0", "Newer than the control plane"},
		{"1.5.0", "1.5.0", ""},
		{"v1.5.0", "1.5.0", ""},
		{"dev", "1.5.0", "Version not comparable"},
		{"1.4.0-3-gabc1234", "1.5.0", "Version not comparable"},
		{"1.5.0", "dev", "Version not comparable"},
		{"dev", "dev", ""},
		{"", "1.5.0", "Version not comparable"},
	}
	for _, c := range cases {
		if got := Skew(c.agent, c.cp); got != c.want {
			t.Errorf("Skew(%q, %q) = %q, want %q", c.agent, c.cp, got, c.want)
		}
	}
}

func TestBehind(t *testing.T) {
	for _, c := range []struct {
		agent, cp string
		want      bool
	}{
		{"1.4.0", "1.5.0", true},
		{"1.5.0", "1.5.0", false},
		{"1.6.0", "1.5.0", false},
		{"dev", "1.5.0", false},
		{"1.4.0-3-gabc1234", "1.5.0", false},
	} {
		if got := Behind(c.agent, c.cp); got != c.want {
			t.Errorf("Behind(%q, %q) = %v, want %v", c.agent, c.cp, got, c.want)
		}
	}
}
