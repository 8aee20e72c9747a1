//go:build unix

package main

import (
	"errors"
	"syscall"
)

// rcvbufControl sets a dialed socket's receive buffer to n bytes (none if
// n <= 0), before it connects.
func rcvbufControl(n int) func(_, _ string, c syscall.RawConn) error {
	if n <= 0 {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n) })
		return errors.Join(err, serr)
	}
}
