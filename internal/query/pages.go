package query

import (
	"context"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// The lists that grow without bound (deployments, releases, change sets)
// are read a page at a time: at most limit rows, in the list's order, after
// the row with id after (from the start when after is ""). Their rows are
// never deleted and their sort keys never change, so a page read after
// another neither repeats nor skips a row, however many rows are added
// meanwhile. An after that is not an id of the list gives an empty page.

// maxPage bounds one page read.
const maxPage = MaxLimit + 1

func pageLimit(n int) int {
	if n <= 0 || n > maxPage {
		return maxPage
	}
	return n
}

// DeploymentsAfter pages the deployments of a service in an environment
// (every service's when serviceID is ""), newest first, as Deployments
// orders them.
func DeploymentsAfter(ctx context.Context, q eventstore.Querier, envID, serviceID, after string, limit int) ([]api.Deployment, error) {
	if !validID(envID) || serviceID != "" && !validID(serviceID) || after != "" && !validID(after) {
		return []api.Deployment{}, nil
	}
	var w where
	w.add("d.environment_id = %s", envID)
	if serviceID != "" {
		w.add("d.service_id = %s", serviceID)
	}
	if after != "" {
		w.add(`(d.requested_at, d.seq, d.id) < (SELECT a.requested_at, a.seq, a.id FROM deployments a
			WHERE a.id = %s AND a.environment_id = d.environment_id)`, after)
	}
	lim := w.next(pageLimit(limit))
	return list(ctx, q, "deployments of environment "+envID, scanDeployment,
		deploymentSelect+` WHERE `+w.sql()+` ORDER BY d.requested_at DESC, d.seq DESC, d.id DESC LIMIT `+lim, w.args...)
}

// ReleasesAfter pages the releases of a service in an environment (every
// service's when serviceID is ""), newest first, as Releases orders them.
func ReleasesAfter(ctx context.Context, q eventstore.Querier, envID, serviceID, after string, limit int) ([]api.Release, error) {
	if !validID(envID) || serviceID != "" && !validID(serviceID) || after != "" && !validID(after) {
		return []api.Release{}, nil
	}
	var w where
	w.add("r.environment_id = %s", envID)
	if serviceID != "" {
		w.add("r.service_id = %s", serviceID)
	}
	if after != "" {
		// created_at and number descending, then id ascending.
		w.add(`EXISTS (SELECT 1 FROM releases a WHERE a.id = %s AND a.environment_id = r.environment_id
			AND ((r.created_at, r.number) < (a.created_at, a.number)
			  OR (r.created_at, r.number) = (a.created_at, a.number) AND r.id > a.id))`, after)
	}
	lim := w.next(pageLimit(limit))
	return list(ctx, q, "releases of environment "+envID, scanRelease,
		releaseSelect+` WHERE `+w.sql()+` ORDER BY r.created_at DESC, r.number DESC, r.id LIMIT `+lim, w.args...)
}

// ChangeSetsAfter pages the change sets of an environment, newest first, as
// ChangeSets orders them; status filters unless it is "".
func ChangeSetsAfter(ctx context.Context, q eventstore.Querier, envID, status, after string, limit int) ([]api.ChangeSet, error) {
	if !validID(envID) || after != "" && !validID(after) {
		return []api.ChangeSet{}, nil
	}
	var w where
	w.add("environment_id = %s", envID)
	if status != "" {
		w.add("status = %s", status)
	}
	if after != "" {
		// opened_at descending, then id ascending.
		w.add(`EXISTS (SELECT 1 FROM changesets a WHERE a.id = %s AND a.environment_id = changesets.environment_id
			AND (changesets.opened_at < a.opened_at OR changesets.opened_at = a.opened_at AND changesets.id > a.id))`, after)
	}
	lim := w.next(pageLimit(limit))
	return list(ctx, q, "change sets of environment "+envID, scanChangeSet,
		`SELECT `+changeSetColumns+` FROM changesets WHERE `+w.sql()+` ORDER BY opened_at DESC, id LIMIT `+lim, w.args...)
}

// The items of the lists paged in memory are found again by a key when
// their next page is read (the cursor names the last item of a page). Most
// have an id or a name; these have neither, and their key is what makes a
// row of theirs unique.
