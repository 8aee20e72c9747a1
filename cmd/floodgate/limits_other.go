//go:build !unix

package main

// fileLimit is 0 where the file limit cannot be read: -max-connections
// then defaults to transport.DefaultMaxConns.
func fileLimit() uint64 { return 0 }
