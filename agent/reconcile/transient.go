package reconcile

import (
	"context"
	"errors"
	"net"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// IsTransient reports whether err is one that trying again later may cure:
// the API server overloaded, timing out, failing inside or out of reach, or
// an optimistic-concurrency conflict. Anything else (Forbidden, Invalid, a
// name that belongs to another service, a Secret whose content would have
// to change) stays until someone changes the document or the cluster.
//
// A cancelled context is not transient: the caller stopped.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch {
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err),
		apierrors.IsConflict(err):
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code >= http.StatusInternalServerError || code == http.StatusTooManyRequests
	}
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}
