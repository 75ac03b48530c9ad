package main

import (
	"errors"
	"fmt"
	"strconv"
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
administrator). --follow keeps printing new entries until interrupted.

With -o json (or --json) or -o yaml the entries are one array; with -o jsonl,
and with --follow and -o json, each entry is one line of JSON as it comes.

Example:
   nebula audit --org acme --since 24h --action 'deployment.*'
   nebula audit --org acme -o json | jq '.[].action'
   nebula audit --follow -o jsonl`,
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
		return usagef("give either --org or --all, not both")
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
	format, follow := x.format(), x.Bool("follow")
	if follow && format == outYAML {
		return usagef("--follow prints JSON lines (-o json or -o jsonl), not YAML")
	}
	lines := format == outJSONL || (follow && format == outJSON)
	header := format == outTable
	all := []api.AuditEntry{}
	for {
		page, err := cl.Audit(ctx, q)
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil // interrupted
			}
			return err
		}
		switch {
		case lines:
			if err := emitTo(x.out, outJSONL, page.Items); err != nil {
				return err
			}
		case format != outTable:
			all = append(all, page.Items...)
		case len(page.Items) > 0 || header:
			printEntries(x, page, header)
			header = false
		}
		if n := len(page.Items); n > 0 {
			q.Cursor = strconv.FormatInt(page.Items[n-1].Seq, 10)
		}
		if page.Next != "" {
			q.Cursor = page.Next
			continue // a full page: there is more right now
		}
		if !follow {
			if format != outTable && !lines {
				return x.emit(all)
			}
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
	for _, e := range page.Items {
		target := e.Target.Name
		if target == "" {
			target = e.Target.Kind + " " + e.Target.ID
		}
		actor := e.Actor.Name
		if e.Via != "" {
			actor += " via " + e.Via
		}
		rows = append(rows, []string{when(e.OccurredAt), cell(actor), e.Action, cell(target), cell(e.Detail)})
	}
	if header {
		x.table("TIME\tACTOR\tACTION\tTARGET\tDETAIL", rows)
		return
	}
	x.table("", rows)
}
