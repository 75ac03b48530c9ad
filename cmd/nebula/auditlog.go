package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

// auditPollInterval is how often nebula audit --follow asks for new entries.
var auditPollInterval = 2 * time.Second

// auditLogSpec is nebula audit without a subcommand: the audit log read
// through the API. Its flags and action are those of the audit command in
// audit.go, whose subcommands work on the database instead.
func auditLogSpec() spec {
	return spec{
		name: "audit", usage: "read the audit log",
		description: `Without a subcommand, prints the audit log through the API: the organisation's
(--org, or your only organisation), or with --all the whole log (instance
administrator). --follow keeps printing new entries until interrupted. With
--json every entry is one line of the API's JSON.

Example:
   nebula audit --org acme --since 24h --action 'deployment.*'
   nebula audit --follow`,
		flags: []cli.Flag{
			&cli.StringFlag{Name: "org", Usage: "the organisation whose log to read (default: your only one)"},
			&cli.BoolFlag{Name: "all", Usage: "the whole log of the installation (instance administrator)"},
			&cli.StringFlag{Name: "since", Usage: "entries from this time on (RFC 3339, a date, or a duration back from now such as 24h)"},
			&cli.StringFlag{Name: "until", Usage: "entries before this time"},
			&cli.StringFlag{Name: "action", Usage: "only this action, or a prefix ending in .* (deployment.*)"},
			&cli.StringFlag{Name: "actor", Usage: "only entries of this actor id"},
			&cli.StringFlag{Name: "target", Usage: "only entries whose target starts with this (acme/shop)"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new entries (every 2 s) until interrupted"},
		},
		json: true, nargs: 0,
		run: runAuditLog,
	}
}

// auditLogFlags are the flags of nebula audit without a subcommand.
func auditLogFlags() []cli.Flag { return auditLogSpec().command().Flags }

// auditLogAction is the action of nebula audit without a subcommand.
func auditLogAction(c *cli.Context) error { return auditLogSpec().command().Action(c) }

func runAuditLog(x *cmdCtx) error {
	if x.Bool("all") && x.String("org") != "" {
		return errors.New("give either --org or --all, not both")
	}
	now := timeNow()
	q := client.AuditQuery{Org: x.String("org"), Action: x.String("action"), Actor: x.String("actor"), Target: x.String("target"), Limit: 1000}
	var err error
	if s := x.String("since"); s != "" {
		if q.Since, err = parseWhen(s, now); err != nil {
			return err
		}
	}
	if s := x.String("until"); s != "" {
		if q.Until, err = parseWhen(s, now); err != nil {
			return err
		}
	}
	cl, err := x.client()
	if err != nil {
		return err
	}
	ctx := x.Context.Context
	if q.Org == "" && !x.Bool("all") {
		orgs, err := cl.Organisations(ctx)
		if err != nil {
			return err
		}
		switch len(orgs) {
		case 0:
			return errors.New("you are a member of no organisation (an instance administrator reads the whole log with --all)")
		case 1:
			q.Org = orgs[0].Name
		default:
			names := make([]string, len(orgs))
			for i, o := range orgs {
				names[i] = o.Name
			}
			return fmt.Errorf("you are a member of several organisations (%s): give --org ORG", strings.Join(names, ", "))
		}
	}
	asJSON, follow := x.Bool("json"), x.Bool("follow")
	header := !asJSON
	for {
		var raw []byte
		page, err := cl.Audit(client.CaptureBody(ctx, &raw), q)
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil // interrupted
			}
			return err
		}
		if asJSON {
			if err := printEntriesJSON(x, raw); err != nil {
				return err
			}
		} else if len(page.Entries) > 0 || header {
			printEntries(x, page, header)
			header = false
		}
		if n := len(page.Entries); n > 0 {
			q.Cursor = page.Entries[n-1].Seq
		}
		if page.NextCursor != 0 {
			q.Cursor = page.NextCursor
			continue // a full page: there is more right now
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(auditPollInterval):
		}
	}
}

func printEntries(x *cmdCtx, page api.AuditPage, header bool) {
	var rows [][]string
	for _, e := range page.Entries {
		target := e.Target.Name
		if target == "" {
			target = e.Target.Kind + " " + e.Target.ID
		}
		rows = append(rows, []string{when(e.OccurredAt), cell(e.Actor.Name), e.Action, cell(target), cell(e.Detail)})
	}
	if header {
		x.table("TIME\tACTOR\tACTION\tTARGET\tDETAIL", rows)
		return
	}
	x.table("", rows)
}

// printEntriesJSON prints each entry of a page as one line of the API's JSON.
func printEntriesJSON(x *cmdCtx, raw []byte) error {
	var page struct {
		Entries []json.RawMessage `json:"entries"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return err
	}
	for _, e := range page.Entries {
		b, err := json.Marshal(e) // compacts
		if err != nil {
			return err
		}
		x.printf("%s\n", b)
	}
	return nil
}
