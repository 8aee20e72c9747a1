package goredisstore_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/redisstore"
	"github.com/floodgate-rl/floodgate/store/redisstore/goredisstore"
)

// The example expects a Redis on localhost:6379; it has no Output line,
// so go test compiles it without running it. The tests of the package run
// the same calls on servers of their own.

func ExampleNew() {
	// MaxRetries -1: go-redis would otherwise resend a script whose reply
	// was lost, counting the request twice. ContextTimeoutEnabled lets the
	// callers' deadlines reach the socket.
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close() // the store does not close a client it was given
	store, err := goredisstore.New(client, &redisstore.Options{Prefix: "myapp"})
	if err != nil {
		log.Fatal(err)
	}
	limiter, _ := floodgate.New(store, nil)
	_, _ = limiter.Allow(context.Background(), "user:42", floodgate.Limit{Limit: 100, Period: time.Minute})
}
