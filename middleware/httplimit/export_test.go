package httplimit

import "time"

// SetWaitTimer makes after the timer of m's waits (Config.MaxWait): it
// is called with each wait's delay as it starts; the wait ends when its
// channel delivers, or earlier when the request's context ends; stop is
// called as the wait ends either way, after a slot given back.
func SetWaitTimer(m *Middleware, after func(time.Duration) (<-chan time.Time, func() bool)) {
	m.chk.After = after
}
