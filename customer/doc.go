// Package customer holds the receiving end of an application: a queue of
// incoming messages ordered by priority, one goroutine that hands them to the
// application's handler, and the tracker that counts the responses to each
// request the application sent.
//
// A request is identified by its timestamp, which the tracker issues. Unlike
// C++ ps-lite, which keeps one tracker entry per request for the life of the
// process, the tracker here forgets a request as soon as all its responses
// have arrived, so its memory is bounded by the number of requests in flight;
// waiting on a finished timestamp still returns at once. Timestamps wrap from
// math.MaxInt32-1 back to 0 (math.MaxInt32 means "no timestamp" on the wire).
package customer
