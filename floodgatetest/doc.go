// Package floodgatetest tests floodgate.Store implementations: Run is the
// conformance suite every store passes, modelled on testing/slogtest; and
// FakeClock is a clock for tests.
package floodgatetest
