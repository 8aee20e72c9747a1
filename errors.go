package floodgate

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrInvalidLimit is wrapped by every error about a Limit that cannot be
	// used; the message names the field, and errors.As finds a *FieldError
	// for each problem.
	ErrInvalidLimit = errors.New("floodgate: invalid limit")
	// ErrInvalidRequest is wrapped by every error about a Request (key, cost,
	// time or lease) that cannot be decided; the message names the field,
	// and errors.As finds its *FieldError.
	ErrInvalidRequest = errors.New("floodgate: invalid request")
	// ErrUnexpectedReply is wrapped when a store answers something it should
	// not (a Redis reply of the wrong shape): a bug or a foreign key, never a
	// denial.
	ErrUnexpectedReply = errors.New("floodgate: unexpected reply from store")
	// ErrNotSupported is returned for an optional ability (Reset, a batch)
	// that the store does not have.
	ErrNotSupported = errors.New("floodgate: not supported by this store")
	// ErrClosed is returned by a store used after Close.
	ErrClosed = errors.New("floodgate: store closed")
	// ErrConflict is wrapped when a reservation ID (an idempotency key) is
	// used again for another request: a reserve of other keys, limits or
	// units, a commit of another cost, a commit after a cancel or the
	// other way round. Nothing changed. HTTP 422 (Unprocessable Content),
	// as the IETF idempotency-key draft answers a reused key.
	ErrConflict = errors.New("floodgate: reservation ID already used for another request")
	// ErrExpired is wrapped when a commit or cancel comes after the
	// reservation expired: its units stayed charged, or were given back if
	// it was made with ReleaseOnExpiry. HTTP 410 (Gone).
	ErrExpired = errors.New("floodgate: reservation expired")
	// ErrUnknownReservation is wrapped when a store holds no reservation
	// of that ID for the key: never made, made on another key or limit, or
	// forgotten after its retention. HTTP 404.
	ErrUnknownReservation = errors.New("floodgate: no such reservation")
	// ErrSplitReservation is the failure of a reservation whose items an
	// outage split between the shared store and this instance's local
	// store (FailLocal on some of its rules, not all, or the open breaker
	// deciding some locally while the store answered the rest): a
	// reservation is held, committed and cancelled in one store, all or
	// nothing, so it is cancelled on both sides and every item answered
	// as FailClosed. It wraps the store's failure when there was one.
	ErrSplitReservation = errors.New("floodgate: reservation split between the shared store and the local store")
	// ErrStore is wrapped by a store's own failure: the store is
	// unreachable, timed out or failed to answer (a Redis client's network
	// error, a WAIT that too few replicas acknowledged). A store wraps
	// each such error in it, fmt.Errorf("%w: %w", ErrStore, err), and
	// nothing else.
	//
	// The rule of failure policies is positive: only a store failure is
	// answered by the policy (FailOpen allows, FailClosed denies,
	// FailLocal decides locally and opens its breaker), so that a new kind
	// of error is never taken for an outage. A store failure wraps
	// ErrStore, ErrUnexpectedReply (the store answered something it
	// should not), ErrClosed (the store was closed under the call) or
	// context.DeadlineExceeded (no answer within the call's deadline,
	// Options.Timeout or the caller's). Every other error is denied with
	// the error, Outcome.Policy FailClosed, whatever the policy: the
	// caller's mistakes and a working store's answers (ErrInvalidRequest,
	// ErrInvalidLimit, ErrNotSupported, ErrConflict, ErrExpired,
	// ErrUnknownReservation), and the failures of a decorator's own work
	// (a durable record that could not be written). One exception: a
	// cancelled call (context.Canceled) is answered by the policy, but
	// never decided locally and never opens the breaker, since its caller
	// gave up, which says nothing about the store.
	ErrStore = errors.New("floodgate: store unavailable")
)

// isStoreFailure reports whether err, returned by a store, is the store's
// own failure (see ErrStore): what FailLocal decides locally and what opens
// its breaker. A cancelled call is not one.
func isStoreFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, ErrStore) || errors.Is(err, ErrUnexpectedReply) || errors.Is(err, ErrClosed) ||
		errors.Is(err, context.DeadlineExceeded)
}

// answersByPolicy reports whether a failure policy answers err: a store
// failure, or a cancelled call (see ErrStore).
func answersByPolicy(err error) bool {
	return isStoreFailure(err) || errors.Is(err, context.Canceled)
}

// A FieldError is one problem of an input: the field it is in and what is
// wrong with it. It is the one field error of Floodgate: Limit.Validate and
// Request.Validate return it, with the field named as in the Limit or
// Request (in lower snake case: "limit", "period", "burst", "window",
// "count_rejected", "local_budget", "algorithm", "key", "cost", "now",
// "lease"); the HTTP API and the Envoy adapter report a request's problem
// as one, with the field as the caller wrote it
// ("descriptors[1].entries[0].key"), and every problem of a config file
// (*config.Error) holds one. Kind is ErrInvalidLimit or ErrInvalidRequest,
// or an edge's own sentinel (config.ErrInvalid), so errors.Is works; an
// edge takes the field from Field with errors.As, never from the message.
// Limit.Validate joins one FieldError per problem; errors.As finds the
// first. A FieldError without a Kind (the zero value) reads as an invalid
// request.
type FieldError struct {
	Kind    error
	Field   string
	Problem string
}

// Error is "<Kind>: <Field>: <Problem>".
func (e *FieldError) Error() string { return e.Unwrap().Error() + ": " + e.Field + ": " + e.Problem }

// Unwrap returns Kind, or ErrInvalidRequest if it is nil.
func (e *FieldError) Unwrap() error {
	if e.Kind == nil {
		return ErrInvalidRequest
	}
	return e.Kind
}

// fieldErr makes a FieldError of kind about field.
func fieldErr(kind error, field, format string, args ...any) error {
	return &FieldError{Kind: kind, Field: field, Problem: fmt.Sprintf(format, args...)}
}
