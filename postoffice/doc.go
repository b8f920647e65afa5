// Package postoffice is the centre of a ps-lite node: it reads the job's
// configuration, owns the van, knows the node groups, ranks and server key
// ranges, keeps the registry of customers that messages are routed to, and
// runs barriers, Start and Finalize.
//
// A process usually has one Postoffice, created from the DMLC_* and PS_*
// environment variables with ConfigFromEnv (package ps wraps that default
// instance in ps-lite's free functions). Tests create several in one process,
// each with its own Config and, optionally, an in-memory transport.
package postoffice
