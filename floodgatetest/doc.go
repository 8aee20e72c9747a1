// Package floodgatetest tests floodgate.Store implementations: Run is the
// conformance suite every store passes, modelled on testing/slogtest; and
// FakeClock is a clock for tests.
//
// A store author calls Run from a test in the store's package, with a
// function that makes the store:
//
//	func TestConformance(t *testing.T) {
//		floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
//			s := mystore.New(…)
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// By default every request the suite sends carries its own Request.Now, so
// the expected decisions are exact to the microsecond and the same on every
// store and machine. A store that can also decide by its own clock (the
// Redis server's TIME) runs the suite a second time with
// Options{ServerTime: true}, which checks what does not depend on the time:
//
//	floodgatetest.Run(t, newStore, floodgatetest.Options{ServerTime: true})
//
// The suite runs its cases in parallel on one store, on keys under a random
// prefix ("floodgatetest:<hex>:"), so it may share a server with other
// tests. Each failure names the request (key, limit, cost, time as an
// offset from the suite's base time) and every field that differs; the
// differential test prints the history of the sequence that failed and
// uses a fixed seed, so a failure repeats.
//
// A store that decides in the store's own process, like store/memstore,
// should also run the suite with its clock replaced by a FakeClock and
// ServerTime set, so that the path that reads its clock is tested too.
package floodgatetest
