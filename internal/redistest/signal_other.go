//go:build !unix

package redistest

import "os"

// Without SIGTERM, SIGSTOP and SIGCONT, Stop kills the process and Pause and
// Resume return an error. Redis does not run on such platforms anyway; this
// file only keeps the package compiling there.
var (
	sigTerm os.Signal = os.Kill
	sigStop os.Signal
	sigCont os.Signal
)
