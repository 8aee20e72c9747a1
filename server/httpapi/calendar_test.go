package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAllowCalendar: a limit with a calendar unit in place of a period
// decides on the calendar's window, whose end the answer and the
// RateLimit header give; a bad zone, anchor or mix is a 400 naming the
// field.
func TestAllowCalendar(t *testing.T) {
	h := apiHandler(t)
	post := func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/allow", strings.NewReader(body)))
		return rec
	}
	rec := post(`{"key": "tenant", "limit": {"limit": 1000, "unit": "month", "time_zone": "America/New_York"}, "cost": 1}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got struct {
		Allowed      bool  `json:"allowed"`
		Remaining    int64 `json:"remaining"`
		ResetAfterMS int64 `json:"reset_after_ms"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	now := start.In(ny) // apiHandler's fake clock
	end := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, ny)
	reset := time.Duration(got.ResetAfterMS) * time.Millisecond
	if !got.Allowed || got.Remaining != 999 {
		t.Fatalf("answer %+v", got)
	}
	// The window ends at local midnight on the 1st (reset_after_ms is
	// rounded up to the millisecond).
	if d := end.Sub(now) - reset; d <= -time.Millisecond || d > 0 {
		t.Fatalf("reset_after %v, but local midnight on the 1st is %v away", reset, end.Sub(now))
	}
	for _, tc := range []struct{ body, field string }{
		{`{"key": "t", "limit": {"limit": 1, "unit": "month", "time_zone": "Mars/Olympus"}}`, "limit.time_zone"},
		{`{"key": "t", "limit": {"limit": 1, "unit": "month", "anchor": "32"}}`, "limit.anchor"},
		{`{"key": "t", "limit": {"limit": 1, "unit": "hour"}}`, "limit.unit"},
		{`{"key": "t", "limit": {"limit": 1, "unit": "month", "period": "1h"}}`, "limit.period"},
		{`{"key": "t", "limit": {"limit": 1, "time_zone": "UTC"}}`, "limit.unit"},
		{`{"key": "t", "limit": {"limit": 1, "unit": "month", "algorithm": "gcra"}}`, "limit.calendar"},
	} {
		rec := post(tc.body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"field":"`+tc.field+`"`) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.body, rec.Code, rec.Body, tc.field)
		}
	}
}
