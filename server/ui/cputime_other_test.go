//go:build !unix

package ui

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }
