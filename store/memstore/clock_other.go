//go:build !(linux && amd64)

package memstore

import "time"

// systemMicros is time.Now().UnixMicro().
func systemMicros() int64 { return time.Now().UnixMicro() }
