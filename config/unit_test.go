package config

import (
	"strings"
	"testing"
	"time"
)

func TestUnits(t *testing.T) {
	for _, tt := range []struct {
		name   string
		length time.Duration
	}{
		{"second", time.Second}, {"MINUTE", time.Minute}, {"Hour", time.Hour}, {"day", 24 * time.Hour},
		{"week", 7 * 24 * time.Hour}, {"month", 30 * 24 * time.Hour}, {"year", 365 * 24 * time.Hour},
	} {
		got, ok := UnitLength(tt.name)
		if !ok || got != tt.length {
			t.Errorf("UnitLength(%q) = %v, %v; want %v", tt.name, got, ok, tt.length)
		}
		if name, ok := UnitOf(tt.length); !ok || !strings.EqualFold(name, tt.name) {
			t.Errorf("UnitOf(%v) = %q, %v; want %q", tt.length, name, ok, tt.name)
		}
	}
	if _, ok := UnitLength("fortnight"); ok {
		t.Error(`UnitLength("fortnight") is a unit`)
	}
	if name, ok := UnitOf(90 * time.Second); ok {
		t.Errorf("UnitOf(90s) = %q, want no unit", name)
	}
}
