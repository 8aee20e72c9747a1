package algorithm

// Raise raises the count of the window that starts at start to at least
// units, as a durable record (a ledger) that counted them rebuilds a lost
// counter. The window must be live at now (start <= now < start+Period),
// else nothing changes. No live state becomes {start, units}; a live
// state keeps its window and the larger of its count and units, also when
// its window started elsewhere (a first_hit window the store opened after
// it lost the record's): the two overlap, and for a quota that is paid
// for the units used count until the later window ends, erring on the
// side of denying. The count stops at Limit+1, as CountRejected's does:
// every count above Limit decides alike. Raise never lowers a count, and
// raising twice to the same units changes nothing more.
//
// For a calendar limit the window that starts at start must be the one of
// Params.Calendar that contains now.
func (s FixedWindow) Raise(p Params, now, start, units int64) FixedWindow {
	end, next := start+p.Period, int64(0)
	if p.Calendar != nil {
		var ws int64
		ws, end, _ = p.Calendar.Window(now)
		if ws != start {
			return s
		}
		next = end
	}
	if units <= 0 || now < start || now >= end {
		return s
	}
	units = min(units, p.Limit+1)
	if !s.Live(p, now) {
		return FixedWindow{Start: start, Count: units, Next: next}
	}
	s.Count = max(s.Count, units)
	return s
}

// Live reports whether the window has a count at now: a count above zero
// in a window that has not ended. A durable quota's counter that is not
// live may have been lost by its store, and is rebuilt from the ledger
// before it decides (floodgate.Rebuild).
func (s FixedWindow) Live(p Params, now int64) bool {
	return s.Count > 0 && now < s.end(&p)
}
