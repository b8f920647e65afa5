// Package message defines what travels between ps-lite nodes: the Meta that
// heads every message, the data frames that follow it, and the node ids and
// groups used to address them.
//
// The wire form of Meta is the protobuf message ps.PBMeta (see pb/meta.proto),
// identical to C++ ps-lite's, so Go and C++ nodes can share one job. Encode
// and Decode convert between Meta and its wire bytes following C++ ps-lite's
// conventions exactly: app_id and timestamp are written only when they are not
// Empty, and an absent field reads back as Empty (math.MaxInt32).
//
// Values travel as raw little-endian arrays; Frame and Values convert between
// typed slices and frames without copying where the platform allows it.
//
// A busy node sends and receives millions of small messages. Get and
// Recycle reuse them: the van receives into reused messages, customers set
// to recycle (customer.Customer.SetRecycles) give them back once handled,
// and the KV layer sends its requests and responses with
// van.Van.SendRecycled. AppendEncode and Message.DecodeMeta encode and
// decode a meta without allocating.
//
// Memory a transport lends with a received message is held by a Loan,
// which gives it back exactly once, from a list of its own, when its last
// hold is dropped (Message.Release, Message.Own, Message.Recycle, or the
// end of a send that holds it with HoldLent). docs/MEMORY.md has the whole
// ownership model in one table.
package message
