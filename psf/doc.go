// Package psf adds Angel-style PS functions to pslite: named matrices of
// float64 held by the servers, dense or sparse with int64 column ids, and
// functions that run on the servers, next to the data, instead of pulling
// it to a worker.
//
// # Matrices
//
// A dense matrix is Rows x Cols float64 values cut into partitions of
// RowBlock rows by ColBlock columns, spread over the servers round-robin
// (MatrixMeta). By default there is one row block and each row's columns
// are cut into one block per server, so every row is spread over all
// servers and any function over several rows runs. With several row
// blocks, a function over several rows needs them colocated
// (MatrixMeta.Colocated) and otherwise fails with ErrNotColocated.
//
// A sparse matrix (MatrixMeta.Type Sparse) has a column for every int64
// and stores the entries that are not +0, in open-addressing hash tables
// of 20 to 32 bytes per entry. Its columns are cut into one block per
// server by a hash of the id (SplitMix64, MatrixMeta.ColBlockOf), which
// spreads ids evenly whether they are small, clustered or hashed already,
// and keeps all rows colocated. Functions that keep zeros zero run on the
// stored entries, the aggregates count the columns not stored as zeros,
// and the functions that would give them another value (Exp, AddS with
// s != 0, Div, Fill with a value, the random fills) fail with ErrSparse,
// as do the calls that take or return whole dense rows. Sparse rows travel
// as SparseVector (sorted ids and values): GetSparseRow(s),
// GetSparseRowsFlow, IncrementRowsAt, UpdateRowsAt, UpdateSparseRow(s);
// GetAt64, IncrementAt, UpdateAt and GetRowsAt(64) take ids of either
// kind of matrix. README.md lists the rule of every function.
//
// On a server, NewServer(po) holds the partitions; on a worker,
// NewClient(po) creates (CreateMatrix) or opens (OpenMatrix) matrices and
// returns a *Matrix to read and change them: GetRow, GetRows,
// GetRowsFlow, GetAt, GetAt64, GetRowsAt, GetRowsAt64, GetSparseRow(s),
// GetSparseRowsFlow, IncrementRow(s), IncrementAt, IncrementRowsAt,
// UpdateRow(s), UpdateAt, UpdateRowsAt, UpdateSparseRow(s), Get(ctx, m, f)
// for any get function and m.Update(ctx, f) for any update function, each
// with an Async form returning a Future or a Handle.
//
// # Functions
//
// A get function reads a matrix: the worker splits its request into one
// parameter per partition (GetFunc.Split), each server runs the kernel on
// its partitions (GetKernel), and the worker merges the partial results
// (GetFunc.Merge). An update function changes a matrix the same way,
// without results (UpdateFunc, UpdateKernel). Kernels are registered by
// name (Register, MustRegister) in a registry every process of the job has
// (they run the same binary); the wire carries the name and the encoded
// parameters (Codec, Encoder, Decoder). A name a server does not know, or
// parameters it cannot decode, fail the call with an error matching
// ErrUnknownFunction or ErrBadRequest; the server goes on. Kernels reach
// dense rows with Block.Row and sparse ones with Block.SparseRow. The
// library:
//
//   - aggregates (GetFunc): Sum, Asum, Max, Min, Amax, Amin, Nnz, Nrm2,
//     Dot, Equal, Size, Pull, PullRows, PullAt, PullRowsAt, PullSparse,
//     PullSparseRows;
//   - unary, row from into row to: Abs, Ceil, Floor, Round, Signum, Sqrt,
//     Exp, Expm1, Log, Log10, Log1p, Copy;
//   - with a scalar: AddS, SubS, MulS, DivS, Pow;
//   - two rows into a third: Add, Sub, Mul, Div, MaxV, MinV;
//   - in place: Axpy, Scale, Fill, RandomUniform, RandomNormal;
//   - with values from the worker: Increment(Rows|At|RowsAt), MaxA, MinA,
//     MaxAt, MinAt, Put(Rows|At|RowsAt), PutSparseRows;
//   - user kernels: Map, Zip2Map, Zip3Map with kernels made by NewMap,
//     NewMapWithIndex, NewZip2Map, NewZip2MapWithIndex, NewZip3Map,
//     NewZip3MapWithIndex.
//
// See README.md for writing your own function.
//
// # Wire protocol
//
// psf rides on KV requests of bytes (kv.KVWorker[uint8], PushPull) with
// commands in a reserved range, [CmdBase, CmdEnd) = [1<<20, 1<<20+256),
// under app id DefaultAppID, so plain KV traffic is unaffected. A
// function call (CmdFunc) has one key per partition: server s's first key
// plus the partition id, which routes it to the partition's server; its
// value is the payload
//
//	version byte (1), kind byte (1 get, 2 update),
//	matrix name, function name (varint length + bytes each),
//	parameters (varint length + bytes, the kernel's Codec)
//
// Matrix operations (CmdSystem) have one key per server (its first key):
// version, operation, matrix name, arguments. Every key is answered with a
// payload: a status byte, then the result (varint length + bytes) for
// status 0, or the error message. Numbers in psf encodings are
// little-endian fixed-size (float64, uint64) or varints (lengths,
// integers); a Decoder bounds every length by the input left, so hostile
// input cannot make a server allocate much, and a kernel that panics is
// answered as an error.
//
// # Saving and checkpoints
//
// Matrix.Save writes a matrix to a directory on the servers (a small
// meta.json and one checksummed binary file per partition holding the rows
// that are not all zeros, or a sparse matrix's stored entries; format in
// store.go and README.md);
// Client.LoadMatrix and Matrix.Load read it back, into any number of
// servers and layout. Matrix.Checkpoint(id) and Matrix.Recover(id) do the
// same in the servers' checkpoint directory (WithCheckpointDir), and a
// server that replaces a dead one restores its partitions from the latest
// checkpoint when it starts. Client.DeleteMatrix removes a matrix's
// checkpoints as well.
//
// # Managed jobs
//
// In a managed job (PS_REPLICAS, PS_CHECKPOINT_DIR) a Server is its KV
// server's store (kv.Store): the requests that change matrices (update
// kernels, create, drop, delete, load and its commit or abort) are applied
// by every server holding their key range, the others (get kernels, meta,
// saves) by its head; ranges are copied to servers that join them and
// written to the job's snapshots (Server.Snapshot, Server.Restore). A
// snapshot restores only into a job of the same number of servers: use
// Matrix.Save and Client.LoadMatrix to move matrices to another.
//
// # Atomicity
//
// An update changes each partition completely or not at all: a kernel
// that fails or panics leaves its partition as it was. Across partitions
// and servers an update is not atomic: the partitions that succeeded keep
// the change, and the caller gets the error of those that failed.
// CreateMatrix and loads are all or nothing over the servers.
//
// Rows take memory once written; rows never written read as zeros without
// being allocated.
//
// Only float64 values are supported.
package psf
