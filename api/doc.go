// Package api holds the REST API's wire types: the request and response
// bodies of /api/v1 and the JSON rows it returns (organisations, projects,
// services, releases, deployments and their stages, change sets, builds,
// clusters and servers, the audit log). It imports only the standard library
// and desiredstate (the desired-state document, itself standard library
// only), so that a program calling the API (package client, the console, the
// CLI) never links a database driver. The server's handlers are in
// internal/httpapi; the read models that fill these rows are in
// internal/query.
package api
