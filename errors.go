package floodgate

import "errors"

var (
	// ErrInvalidLimit is wrapped by every error about a Limit that cannot be
	// used; the message names the field.
	ErrInvalidLimit = errors.New("floodgate: invalid limit")
	// ErrInvalidRequest is wrapped by every error about a Request (key, cost,
	// time or lease) that cannot be decided; the message names the field.
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
