//go:build !unix

package main

import "syscall"

func rcvbufControl(int) func(_, _ string, c syscall.RawConn) error { return nil }
