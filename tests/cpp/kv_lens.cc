// kv_lens is an MXNet-style client of C++ ps-lite, for jobs that mix it with
// our Go nodes (tests/interop_lens_test.go): KVWorker<char> pushes byte
// values of per-key lengths (lens), as MXNet's kvstore_dist does, pulls them
// back and push-pulls, and checks every byte.
//
// Each worker uses keys of its own (the rank is in the key), and a value's
// bytes are a function of (key, byte index, worker rank, round), so a byte
// of another worker, another key, another offset or an earlier round is
// caught. The servers it needs store each key's bytes on a push (replacing
// what was there, whatever its length) and answer a pull with the stored
// bytes and their lengths: tests/test_kv_lens is such a Go server, and this
// program is one too when run as a server (for all-C++ jobs).
//
// Rounds: one key of 8 bytes; 100 small keys; 1000 keys of 1-4 bytes; 100
// keys with a large value every tenth key; 4 keys of about 2 MiB; one key of
// 3 MiB; the 100 keys again with other lengths. Frames are below and above
// 512 KiB. Each round is pushed, pulled, push-pulled and pulled again, one
// request at a time; then all rounds are pushed at once, pulled at once and
// push-pulled at once.
// Every push and push-pull sends bytes of its own: the round in the bytes
// (and in messages) counts them, 0 to 25.
//
// On success a worker prints "kv_lens: checked N bytes exactly (worker R)"
// and exits 0; on a mismatch it prints the first mismatches (key, offset,
// got, want) and exits 1.
//
// Build against a C++ ps-lite build:
//   g++ -std=c++14 -O2 -pthread -isystem <ps-lite>/include kv_lens.cc
//       <libps.a> -lzmq -lprotobuf -lpthread -o kv_lens
#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

namespace {

using ps::Key;

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Byte i of key's value from worker rank in round; tests/test_kv_lens
// computes the same.
struct Pattern {
  uint64_t seed;
  Pattern(Key key, int rank, int round)
      : seed(Mix(key ^ Mix(static_cast<uint64_t>(rank) + 1) ^
                 Mix((static_cast<uint64_t>(round) + 1) << 32))) {}
  uint8_t At(uint64_t i) const {
    return static_cast<uint8_t>(Mix(seed + i / 8) >> (8 * (i % 8)));
  }
};

// A set of keys with their lengths: key i of n is spread over the key space
// (so that the servers share them), then offset by the set and the rank.
struct Round {
  int set;                     // which keys
  std::vector<int> lens;       // bytes per key
};

std::vector<Round> Rounds() {
  std::vector<Round> rs;
  rs.push_back({0, {8}});
  Round small{1, {}};
  for (int i = 0; i < 100; ++i) small.lens.push_back(1 + (i * 37) % 200);
  rs.push_back(small);
  Round tiny{2, {}};
  for (int i = 0; i < 1000; ++i) tiny.lens.push_back(1 + i % 4);
  rs.push_back(tiny);
  Round mixed{3, {}};
  for (int i = 0; i < 100; ++i) mixed.lens.push_back(i % 10 == 0 ? (256 << 10) + 3 * i + 1 : 3 + i % 13);
  rs.push_back(mixed);
  rs.push_back({4, {(2 << 20) + 1, (2 << 20) - 7, (2 << 20) + 4095, 2 << 20}});
  rs.push_back({5, {(3 << 20) + 5}});
  Round again{3, {}};  // set 3's keys, other lengths (a store replaces them)
  for (int i = 0; i < 100; ++i) again.lens.push_back(i % 10 == 5 ? (600 << 10) + i : 1 + i % 7);
  rs.push_back(again);
  return rs;
}

std::vector<Key> Keys(const Round& r, int rank) {
  size_t n = r.lens.size();
  std::vector<Key> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = ps::kMaxKey / n * i + 64 * r.set + rank;
  return keys;
}

struct Checker {
  uint64_t checked = 0;
  uint64_t bad = 0;  // mismatching bytes or lengths
  int shown = 0;     // of them, printed

  // Check compares vals and lens (as pulled for keys) with round's bytes.
  void Check(const char* what, int round, int rank, const std::vector<Key>& keys,
             const std::vector<int>& want_lens, const ps::SArray<char>& vals,
             const ps::SArray<int>& lens) {
    if (lens.size() != want_lens.size()) {
      Fail(what, round, "got %zu lens for %zu keys", lens.size(), want_lens.size());
      return;
    }
    size_t total = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (lens[i] != want_lens[i]) {
        Fail(what, round, "key %llu: length %d, want %d", (unsigned long long)keys[i], lens[i],
             want_lens[i]);
        return;
      }
      total += want_lens[i];
    }
    if (vals.size() != total) {
      Fail(what, round, "got %zu bytes, want %zu", vals.size(), total);
      return;
    }
    const uint8_t* p = reinterpret_cast<const uint8_t*>(vals.data());
    for (size_t i = 0; i < keys.size(); ++i) {
      Pattern pat(keys[i], rank, round);
      int key_bad = 0;  // at most 3 of a key's mismatches are printed
      for (int j = 0; j < want_lens[i]; ++j, ++p) {
        uint8_t want = pat.At(j);
        if (*p != want && key_bad >= 3) {
          ++bad;
        } else if (*p != want) {
          ++key_bad;
          Fail(what, round, "key %llu (index %zu) offset %d: got 0x%02x, want 0x%02x",
               (unsigned long long)keys[i], i, j, *p, want);
        }
      }
      checked += want_lens[i];
    }
  }

  void Fail(const char* what, int round, const char* format, ...) __attribute__((format(printf, 4, 5))) {
    ++bad;
    if (++shown > 10) return;
    char msg[512];
    va_list ap;
    va_start(ap, format);
    vsnprintf(msg, sizeof msg, format, ap);
    va_end(ap);
    fprintf(stderr, "kv_lens: worker %d: MISMATCH in %s of round %d: %s\n", ps::MyRank(), what,
            round, msg);
  }
};

// One round's request: its keys, lens and pushed bytes, and where pulls go.
struct Request {
  int round;  // the seed of the bytes
  std::vector<Key> key_vec;
  std::vector<int> len_vec;
  ps::SArray<Key> keys;
  ps::SArray<char> vals;
  ps::SArray<int> lens;
  ps::SArray<char> out;
  ps::SArray<int> out_lens;

  Request(const Round& r, int rank, int seed) : round(seed) {
    key_vec = Keys(r, rank);
    len_vec = r.lens;
    keys = ps::SArray<Key>(key_vec);
    lens = ps::SArray<int>(len_vec);
    size_t total = 0;
    for (int l : len_vec) total += l;
    vals = ps::SArray<char>(total);
    uint8_t* p = reinterpret_cast<uint8_t*>(vals.data());
    for (size_t i = 0; i < key_vec.size(); ++i) {
      Pattern pat(key_vec[i], rank, round);
      for (int j = 0; j < len_vec[i]; ++j) *p++ = pat.At(j);
    }
  }
  // Ready sizes the destination of a pull as MXNet does: the values' buffer
  // of their full size, lens of the keys' count.
  void Ready() {
    out = ps::SArray<char>(vals.size(), 0x5A);
    out_lens = ps::SArray<int>(key_vec.size(), -1);
  }
};

void RunWorker() {
  int rank = ps::MyRank();
  if (rank >= 64) {
    fprintf(stderr, "kv_lens: at most 64 workers\n");
    fflush(stderr);
    std::_Exit(1);
  }
  ps::KVWorker<char> kv(0, 0);
  Checker c;
  std::vector<Round> rounds = Rounds();
  int seed = 0;

  // One request at a time: push, pull, push-pull (of other bytes), pull.
  for (const Round& r : rounds) {
    Request q(r, rank, seed++);
    kv.Wait(kv.ZPush(q.keys, q.vals, q.lens));
    q.Ready();
    kv.Wait(kv.ZPull(q.keys, &q.out, &q.out_lens));
    c.Check("pull", q.round, rank, q.key_vec, q.len_vec, q.out, q.out_lens);

    Request pp(r, rank, seed++);
    pp.Ready();
    pp.out_lens = ps::SArray<int>(pp.len_vec);  // sent, then the lens received
    kv.Wait(kv.ZPushPull(pp.keys, pp.vals, &pp.out, &pp.out_lens));
    c.Check("push-pull", pp.round, rank, pp.key_vec, pp.len_vec, pp.out, pp.out_lens);
    pp.Ready();
    kv.Wait(kv.ZPull(pp.keys, &pp.out, &pp.out_lens));
    c.Check("pull after push-pull", pp.round, rank, pp.key_vec, pp.len_vec, pp.out, pp.out_lens);
  }

  // All at once: every round but the last (whose keys are an earlier
  // round's) in flight together: pushes, then pulls, then push-pulls. The
  // requests stay where they are while in flight (pulls write to them).
  std::vector<Request> qs;
  qs.reserve(rounds.size());
  for (size_t i = 0; i + 1 < rounds.size(); ++i) qs.emplace_back(rounds[i], rank, seed++);
  std::vector<int> ts;
  for (auto& q : qs) ts.push_back(kv.ZPush(q.keys, q.vals, q.lens));
  for (int t : ts) kv.Wait(t);
  ts.clear();
  for (auto& q : qs) {
    q.Ready();
    ts.push_back(kv.ZPull(q.keys, &q.out, &q.out_lens));
  }
  for (int t : ts) kv.Wait(t);
  for (auto& q : qs) c.Check("concurrent pull", q.round, rank, q.key_vec, q.len_vec, q.out, q.out_lens);
  std::vector<Request> pps;
  pps.reserve(rounds.size());
  for (size_t i = 0; i + 1 < rounds.size(); ++i) pps.emplace_back(rounds[i], rank, seed++);
  ts.clear();
  for (auto& q : pps) {
    q.Ready();
    q.out_lens = ps::SArray<int>(q.len_vec);
    ts.push_back(kv.ZPushPull(q.keys, q.vals, &q.out, &q.out_lens));
  }
  for (int t : ts) kv.Wait(t);
  for (auto& q : pps) c.Check("concurrent push-pull", q.round, rank, q.key_vec, q.len_vec, q.out, q.out_lens);

  if (c.bad > 0) {
    fprintf(stderr, "kv_lens: worker %d: %llu mismatching bytes or lengths\n", rank,
            (unsigned long long)c.bad);
    fflush(stderr);
    std::_Exit(1);  // not exit: ps-lite's threads are running
  }
  printf("kv_lens: checked %llu bytes exactly (worker %d)\n", (unsigned long long)c.checked, rank);
  fflush(stdout);
}

// A server that stores each key's bytes (replacing them) and answers pulls
// with the stored bytes and their lengths.
class Store {
 public:
  void Handle(const ps::KVMeta& meta, const ps::KVPairs<char>& data, ps::KVServer<char>* server) {
    size_t n = data.keys.size();
    if (meta.push) {
      CHECK_EQ(data.lens.size(), n) << "a push without lens";
      size_t off = 0;
      for (size_t i = 0; i < n; ++i) {
        const char* p = data.vals.data() + off;
        store_[data.keys[i]].assign(p, p + data.lens[i]);
        off += data.lens[i];
      }
      CHECK_EQ(off, data.vals.size());
    }
    ps::KVPairs<char> res;
    if (meta.pull) {
      res.keys = data.keys;
      res.lens.resize(n);
      size_t total = 0;
      for (size_t i = 0; i < n; ++i) total += store_[data.keys[i]].size();
      res.vals.resize(total);
      char* p = res.vals.data();
      for (size_t i = 0; i < n; ++i) {
        const std::vector<char>& v = store_[data.keys[i]];
        std::copy(v.begin(), v.end(), p);
        p += v.size();
        res.lens[i] = static_cast<int>(v.size());
      }
    }
    server->Response(meta, res);
  }

 private:
  std::unordered_map<Key, std::vector<char>> store_;
};

}  // namespace

int main() {
  // As MXNet starts: the node joins, a server sets its handle, and only then
  // does every node meet at the barrier (with ps::Start, a request from a
  // fast worker can reach a server before its KVServer exists).
  ps::StartAsync(0);
  if (ps::IsServer()) {
    auto* store = new Store;
    auto* server = new ps::KVServer<char>(0);
    server->set_request_handle([store](const ps::KVMeta& meta, const ps::KVPairs<char>& data,
                                       ps::KVServer<char>* s) { store->Handle(meta, data, s); });
    ps::RegisterExitCallback([server, store]() {
      delete server;
      delete store;
    });
  }
  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup + ps::kServerGroup + ps::kScheduler);
  if (ps::IsWorker()) RunWorker();
  ps::Finalize(0, true);
  return 0;
}
