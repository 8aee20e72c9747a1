package grpclimit

import "time"

// SetWaitTimer makes after the timer of l's waits (Config.MaxWait), as
// httplimit's SetWaitTimer does.
func SetWaitTimer(l *Interceptor, after func(time.Duration) (<-chan time.Time, func() bool)) {
	l.chk.After = after
}
