package floodgate

import (
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
)

// A FieldError is one problem that Limit.Validate or Request.Validate found:
// the field it is in, named as in the Limit or Request (in lower snake
// case: "limit", "period", "burst", "window", "count_rejected",
// "local_budget", "algorithm", "key", "cost", "now", "lease"), and what is
// wrong with it. It wraps Kind (ErrInvalidLimit or ErrInvalidRequest), so
// errors.Is works as before; an edge that reports the field under its own
// name (an HTTP body, a config file) takes it from Field with errors.As
// instead of from the message. Limit.Validate joins one FieldError per
// problem; errors.As finds the first. Kind should be set: a FieldError
// without one (the zero value) reads as an invalid request.
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
