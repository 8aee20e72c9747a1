package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
)

// freshDecode is decodeStrict as it was before decoders were kept: a new
// decoder for each body.
func freshDecode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON value")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data after the JSON value")
		}
	}
	return err
}

// TestDecodeStrictKept decodes bodies good and bad, in turn, through the
// kept decoders and through a new decoder each: every value and every
// error (its text, its type and its byte offset) must be the same, so
// that a decoder that served earlier bodies, or failed on one, changes
// nothing the caller sees.
func TestDecodeStrictKept(t *testing.T) {
	bodies := []string{
		`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"1"}]}]}`,
		`{"key":"user:1","limit":{"limit":10,"period":"1s"}}` + "\n\n  ",
		`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"2"}],"hits":3}],"hits":2}`,
		`{"domain":"bench"} {"domain":"other"}`,
		`{"domain":"bench"}]`,
		`{"domain":`,
		``,
		`   `,
		`{"domain":"bench","nope":1}`,
		`{"domain":5}`,
		`{"descriptors":[{"entries":[{"key":"user","value":7}]}]}`,
		`{"domain":"a\u00e9\ud83d\ude00","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`,
		`{"key":"k","cost":-1,"limit":{"limit":1,"period":"1m","burst":2,"window":"aligned","count_rejected":true,"name":"n"}}`,
		`[1,2,3]`,
		`null`,
		`{"domain":"bench"}x`,
		`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"deep"}]}]}`,
		`{"domain":"x","descriptors":[{"entries":[{"key":"` + string(bytes.Repeat([]byte("k"), 3000)) + `","value":"v"}]}]}`,
		`{"limit":{"limit":"ten"}}`,
		`{"domain":"bench","descriptors":[]}`,
	}
	for round := range 3 {
		for i, b := range bodies {
			if round == 1 {
				b = bodies[len(bodies)-1-i]
			}
			var got, want AllowRequest
			gerr := decodeStrict([]byte(b), &got)
			werr := freshDecode([]byte(b), &want)
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || reflect.TypeOf(gerr) != reflect.TypeOf(werr) {
				t.Fatalf("round %d, body %q: error %v (%T), want %v (%T)", round, b, gerr, gerr, werr, werr)
			}
			var gs, ws *json.SyntaxError
			if errors.As(gerr, &gs) && errors.As(werr, &ws) && gs.Offset != ws.Offset {
				t.Fatalf("round %d, body %q: offset %d, want %d", round, b, gs.Offset, ws.Offset)
			}
			if gerr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, body %q: %+v, want %+v", round, b, got, want)
			}
			if gerr != nil && jsonError(gerr).Error() != jsonError(werr).Error() {
				t.Fatalf("round %d, body %q: answered %v, want %v", round, b, jsonError(gerr), jsonError(werr))
			}
		}
	}
}
