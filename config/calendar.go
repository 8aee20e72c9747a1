package config

import (
	"errors"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// calendar reads time_zone and anchor of a rate_limit mapping, Floodgate's
// extension for calendar windows (floodgate.Calendar): either makes the
// limit's windows the calendar periods named by unit (day, week, month or
// year; in any case) of the zone (UTC when only an anchor is given), and
// the limit's Period 0. Without either, unit keeps upstream's fixed
// length (a month of 30 days aligned to the epoch), so upstream's files
// load unchanged.
func (p *parser) calendar(fs map[string]*field, fpath func(string) string, lim *floodgate.Limit) {
	zone, anchor := fs["time_zone"], fs["anchor"]
	if zone == nil && anchor == nil {
		return
	}
	unit := fs["unit"]
	if unit == nil {
		at := zone
		if at == nil {
			at = anchor
		}
		p.errorf(at.key, fpath(at.name), "a calendar window needs a unit: day, week, month or year (not a period)")
		return
	}
	u, ok := p.str(unit.val, fpath("unit"))
	if !ok {
		return
	}
	var zs, as string
	if zone != nil {
		if zs, ok = p.str(zone.val, fpath("time_zone")); !ok {
			return
		}
	}
	if anchor != nil {
		if as, ok = p.str(anchor.val, fpath("anchor")); !ok {
			return
		}
	}
	c, err := floodgate.ParseCalendar(strings.ToLower(u), zs, as)
	if err != nil {
		at, name := unit, "unit"
		var fe *floodgate.FieldError
		if errors.As(err, &fe) {
			switch fe.Field {
			case "time_zone":
				at, name = zone, "time_zone"
			case "anchor":
				at, name = anchor, "anchor"
			}
			err = errors.New(fe.Problem)
		}
		p.errorf(at.val, fpath(name), "%v", err)
		return
	}
	lim.Calendar, lim.Period = c, 0
}
