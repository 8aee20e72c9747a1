package config

import (
	"strings"
	"time"
)

// units are upstream's units with upstream's lengths (utils.UnitToDivider
// of envoyproxy/ratelimit), shortest first: a month is 30 days and a year
// 365 days, whatever the calendar says. This table is the one Floodgate
// has: config files and the Envoy protocol (server/envoyrls) both read it.
var units = [...]struct {
	name   string
	length time.Duration
}{
	{"second", time.Second},
	{"minute", time.Minute},
	{"hour", time.Hour},
	{"day", 24 * time.Hour},
	{"week", 7 * 24 * time.Hour},
	{"month", 30 * 24 * time.Hour},
	{"year", 365 * 24 * time.Hour},
}

// unitList names the units for error messages.
const unitList = "second, minute, hour, day, week, month or year"

// UnitLength is the length of the unit named name, in any case ("minute",
// "MINUTE"): one minute. ok is false for a name that is no unit.
func UnitLength(name string) (length time.Duration, ok bool) {
	for _, u := range units {
		if strings.EqualFold(u.name, name) {
			return u.length, true
		}
	}
	return 0, false
}

// UnitOf is the name, in lower case, of the unit whose length is exactly
// period ("minute" for one minute); ok is false when no unit is that long
// (90s).
func UnitOf(period time.Duration) (name string, ok bool) {
	for _, u := range units {
		if u.length == period {
			return u.name, true
		}
	}
	return "", false
}
