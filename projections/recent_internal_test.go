package projections

import (
	"testing"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// An entry counts only for its revision and hash; a copy handed out is the
// caller's to change; the oldest entries go when the budget is spent.
func TestRecentDocumentsCountOnlyForTheirRevisionAndHash(t *testing.T) {
	c := newDocCache(1000)
	doc := desiredstate.Document{SchemaVersion: 1, Services: []desiredstate.Service{{ID: "s", Name: "api",
		Variables: []desiredstate.Variable{{Name: "TOKEN", Secret: &desiredstate.Sealed{DataKeyID: "k"}}}}}}
	c.put(&recentDoc{env: "e1", number: 2, hash: "sha256:a", doc: doc, size: 100})
	for _, miss := range []struct {
		n    int
		hash string
	}{{1, "sha256:a"}, {2, "sha256:b"}, {2, ""}} {
		if _, ok := c.get("e1", miss.n, miss.hash); ok {
			t.Errorf("revision %d with hash %q came from an entry for revision 2 sha256:a", miss.n, miss.hash)
		}
	}
	got, ok := c.get("e1", 2, "sha256:a")
	if !ok {
		t.Fatal("the entry was not found")
	}
	// What a deliverer does with a secret it opens.
	got.doc.Services[0].Variables[0] = desiredstate.Variable{Name: "TOKEN", Value: "plain"}
	got.doc.Services[0] = desiredstate.Service{ID: "s", Name: "api", Held: true}
	again, _ := c.get("e1", 2, "sha256:a")
	if again.doc.Services[0].Held || again.doc.Services[0].Variables[0].Secret == nil {
		t.Fatalf("changing a copy changed the entry: %+v", again.doc.Services[0])
	}

	// Replacing an entry gives its bytes back; the oldest go first.
	c.put(&recentDoc{env: "e1", number: 3, hash: "sha256:c", doc: doc, size: 100})
	for _, env := range []string{"e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9", "e10"} {
		c.put(&recentDoc{env: env, number: 1, hash: "sha256:" + env, doc: doc, size: 100})
	}
	if c.used != 1000 || len(c.m) != 10 || c.order.Len() != 10 {
		t.Fatalf("used %d bytes in %d entries (%d in order), want 1000 in 10", c.used, len(c.m), c.order.Len())
	}
	c.put(&recentDoc{env: "e11", number: 1, hash: "sha256:e11", doc: doc, size: 100})
	if _, ok := c.get("e1", 3, "sha256:c"); ok {
		t.Error("the oldest entry was kept over the budget")
	}
	if _, ok := c.get("e11", 1, "sha256:e11"); !ok {
		t.Error("the newest entry was not kept")
	}
	c.put(&recentDoc{env: "huge", number: 1, hash: "sha256:h", doc: doc, size: 126})
	if _, ok := c.get("huge", 1, "sha256:h"); ok {
		t.Error("an entry of more than an eighth of the budget was kept")
	}
}
