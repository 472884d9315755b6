package oip

import (
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
)

// Class is what kind of failure an Error is; it decides the HTTP status and
// the gRPC code of the reply.
type Class int

// The error classes of the protocol's replies.
const (
	// Internal is a failure of the server itself (HTTP 500, INTERNAL).
	Internal Class = iota
	// InvalidArgument is a malformed or inconsistent request (400,
	// INVALID_ARGUMENT).
	InvalidArgument
	// NotFound is an unknown model, version or route (404, NOT_FOUND).
	NotFound
	// TooLarge is a request body or tensor above a configured limit (413,
	// INVALID_ARGUMENT).
	TooLarge
	// Unavailable is a request the server cannot take now: a full queue, a
	// model that is not ready, a drain, a backend that died twice (503,
	// UNAVAILABLE). Retrying later may succeed.
	Unavailable
	// DeadlineExceeded is a request that ran past its deadline (504,
	// DEADLINE_EXCEEDED).
	DeadlineExceeded
	// Canceled is a request its client gave up on (499, CANCELLED).
	Canceled
)

// Error is a failure to report to a client with one message.
type Error struct {
	Class Class
	Msg   string
	Err   error // the cause, if any (for errors.Is/As)
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Errorf makes an Error of a class. A %w verb keeps the cause.
func Errorf(c Class, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Class: c, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// ClassOf is err's class: that of the first *Error in its chain, Internal
// when there is none.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return Internal
}

// StatusClientClosed is the HTTP status of a request whose client went away
// (nginx's 499; nobody reads it).
const StatusClientClosed = 499

// HTTPStatus is the HTTP status the protocol gives an error class.
func HTTPStatus(c Class) int {
	switch c {
	case InvalidArgument:
		return http.StatusBadRequest
	case NotFound:
		return http.StatusNotFound
	case TooLarge:
		return http.StatusRequestEntityTooLarge
	case Unavailable:
		return http.StatusServiceUnavailable
	case DeadlineExceeded:
		return http.StatusGatewayTimeout
	case Canceled:
		return StatusClientClosed
	}
	return http.StatusInternalServerError
}

// GRPCCode is the gRPC status code of an error class.
func GRPCCode(c Class) codes.Code {
	switch c {
	case InvalidArgument, TooLarge:
		return codes.InvalidArgument
	case NotFound:
		return codes.NotFound
	case Unavailable:
		return codes.Unavailable
	case DeadlineExceeded:
		return codes.DeadlineExceeded
	case Canceled:
		return codes.Canceled
	}
	return codes.Internal
}

// String names the class in logs and metrics ("invalid_argument", ...).
func (c Class) String() string {
	switch c {
	case InvalidArgument:
		return "invalid_argument"
	case NotFound:
		return "not_found"
	case TooLarge:
		return "too_large"
	case Unavailable:
		return "unavailable"
	case DeadlineExceeded:
		return "deadline_exceeded"
	case Canceled:
		return "canceled"
	}
	return "internal"
}

// Wrap puts context before err's message and keeps its class; an error
// without one gets class c.
func Wrap(c Class, err error, format string, args ...any) *Error {
	var e *Error
	if errors.As(err, &e) {
		c = e.Class
	}
	return &Error{Class: c, Msg: fmt.Sprintf(format, args...) + ": " + err.Error(), Err: err}
}
