package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
)

// maxPageSize is the most items per page the API gives.
const maxPageSize = 1000

// WithPageSize sets how many items a list asks for per page (1-1000,
// default 1000); lists still return every item.
func WithPageSize(n int) Option {
	return func(c *Client) { c.pageSize = min(max(n, 1), maxPageSize) }
}

// list reads a list the API pages ({"items": [...], "next": "<cursor>"}),
// following next until the end, or until it has max items (max > 0). A body
// captured with CaptureBody is the JSON array of the items read, so that
// printing a list prints an array whatever the number of pages.
func list[T any](ctx context.Context, c *Client, r request, max int) ([]T, error) {
	dst, _ := ctx.Value(bodyKey{}).(*[]byte)
	inner := context.WithValue(ctx, bodyKey{}, (*[]byte)(nil))
	q := url.Values{}
	for k, v := range r.query {
		q[k] = v
	}
	items := []json.RawMessage{}
	for {
		n := c.pageSize
		if n <= 0 {
			n = maxPageSize
		}
		if max > 0 {
			n = min(n, max-len(items))
		}
		q.Set("limit", strconv.Itoa(n))
		r.query = q
		var page struct {
			Items []json.RawMessage `json:"items"`
			Next  string            `json:"next"`
		}
		if _, err := c.call(inner, r, &page); err != nil {
			return nil, err
		}
		if page.Items == nil {
			return nil, fmt.Errorf("the answer of GET %s is not a page of a list (is %s a NebulaCtrl control plane of this version?)", r.path, c.base)
		}
		items = append(items, page.Items...)
		if page.Next == "" || (max > 0 && len(items) >= max) {
			break
		}
		// A server that gives an empty page or the same cursor again would
		// keep this loop reading for ever.
		if len(page.Items) == 0 || page.Next == q.Get("cursor") {
			return nil, fmt.Errorf("GET %s gave a page that does not advance (cursor %q): the list cannot be read to its end", r.path, page.Next)
		}
		q.Set("cursor", page.Next)
	}
	raw, err := json.Marshal(items)
	if err != nil {
		return nil, err
	}
	if dst != nil {
		*dst = raw
	}
	out := []T{}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("the items of GET %s are not the JSON the API sends: %v", r.path, err)
	}
	return out, nil
}
