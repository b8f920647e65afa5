// psbench for C++ ps-lite: the measurements of bench/psbench (bulk push,
// pull and push-pull, latency, a window of outstanding 1-key pushes and
// synchronous 1-key pushes) written against ps-lite's public API
// (ps/ps.h), so that scripts/bench.sh can run C++ ps-lite and ours in the
// same job shape, alternately, and report ratios.
//
// Launch it like any ps-lite program:
//
//   scripts/local.sh 1 1 build/cpp-psbench -mode=bulk,latency,window -n=10000000
//
// Worker rank 0 prints one line per result, "RESULT {json}", in the format
// bench/psbench reads (its "report" command turns them into
// docs/PERFORMANCE.md). Servers store nothing: a push is answered empty, a
// pull with zeros of the right length. There is no raw ZeroMQ counterpart
// here; the Go program measures that.
//
// Flags (all -name=value): -mode (bulk,latency,window; default all three),
// -n (keys per bulk request, 1000000), -repeat (bulk repetitions, median
// reported; 5), -iters (latency round trips; 2000), -window (outstanding
// requests; 64), -requests (requests in the window measurement; 100000),
// -sync-requests (synchronous requests; -1 means a tenth of -requests),
// -ops (bulk operations; push,pull,pushpull), -label (added to every
// result; default "C++ ps-lite").

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ps/ps.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string mode = "bulk,latency,window";
  std::string ops = "push,pull,pushpull";
  std::string label = "C++ ps-lite";
  std::string keys = "spread";  // or "hashed"
  long n = 1000000;
  int repeat = 5;
  int iters = 2000;
  int window = 64;
  long requests = 100000;
  long syncRequests = -1;  // -1: requests / 10
};

// mix is splitmix64's finaliser: -keys=hashed keys are mix(rank*n + i),
// sorted, as hashed features are (psbench computes the same keys).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// parseFlags reads -name=value arguments; it exits with status 2 on an
// unknown flag or a bad number.
Flags parseFlags(int argc, char* argv[]) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    while (!a.empty() && a[0] == '-') a.erase(0, 1);
    auto eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "cpp-psbench: flag %s: want -name=value\n", argv[i]);
      std::exit(2);
    }
    std::string name = a.substr(0, eq), value = a.substr(eq + 1);
    auto num = [&](long lo) {
      char* end = nullptr;
      long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < lo) {
        std::fprintf(stderr, "cpp-psbench: -%s=%s: want a whole number >= %ld\n", name.c_str(), value.c_str(), lo);
        std::exit(2);
      }
      return v;
    };
    if (name == "mode") {
      f.mode = value;
    } else if (name == "ops") {
      f.ops = value;
    } else if (name == "label") {
      f.label = value;
    } else if (name == "keys") {
      if (value != "spread" && value != "hashed") {
        std::fprintf(stderr, "cpp-psbench: -keys=%s: want spread or hashed\n", value.c_str());
        std::exit(2);
      }
      f.keys = value;
    } else if (name == "n") {
      f.n = num(1);
    } else if (name == "repeat") {
      f.repeat = static_cast<int>(num(1));
    } else if (name == "iters") {
      f.iters = static_cast<int>(num(1));
    } else if (name == "window") {
      f.window = static_cast<int>(num(1));
    } else if (name == "requests") {
      f.requests = num(1);
    } else if (name == "sync-requests") {
      f.syncRequests = num(0);
    } else {
      std::fprintf(stderr, "cpp-psbench: unknown flag -%s\n", name.c_str());
      std::exit(2);
    }
  }
  return f;
}

bool has(const std::string& list, const std::string& item) {
  std::stringstream ss(list);
  std::string x;
  while (std::getline(ss, x, ',')) {
    if (x == item || x == "all") return true;
  }
  return false;
}

// The server's handle: pushes answered empty, pulls with zeros.
void emptyHandle(const ps::KVMeta& meta, const ps::KVPairs<float>& data, ps::KVServer<float>* server) {
  ps::KVPairs<float> res;
  if (meta.pull) {
    res.keys = data.keys;
    res.vals.resize(data.keys.size(), 0);
  }
  server->Response(meta, res);
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

class Bench {
 public:
  explicit Bench(const Flags& f) : f_(f), kv_(0, 0), rank_(ps::MyRank()) {}

  void run() {
    if (has(f_.mode, "bulk")) bulk();
    if (has(f_.mode, "latency")) latency();
    if (has(f_.mode, "window")) windowed();
  }

 private:
  void barrier() { ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup); }

  // result prints one RESULT line (worker 0 only), in bench/psbench's
  // format.
  void result(const std::string& name, long keys, long long bytes, double value, const std::string& unit,
              const std::string& extra) {
    if (rank_ != 0) return;
    std::printf("RESULT {\"name\":\"%s\",\"label\":\"%s\",\"servers\":%d,\"workers\":%d", name.c_str(),
                f_.label.c_str(), ps::NumServers(), ps::NumWorkers());
    if (keys > 0) std::printf(",\"keys\":%ld", keys);
    if (bytes > 0) std::printf(",\"bytes\":%lld", bytes);
    std::printf(",\"value\":%.3f,\"unit\":\"%s\"", value, unit.c_str());
    if (!extra.empty()) std::printf(",\"extra\":\"%s\"", extra.c_str());
    std::printf("}\n");
    std::fflush(stdout);
  }

  void bulk() {
    const long n = f_.n;
    ps::SArray<ps::Key> keys(n);
    ps::SArray<float> vals(n);
    for (long i = 0; i < n; ++i) {
      if (f_.keys == "hashed") {
        keys[i] = mix(static_cast<uint64_t>(rank_) * static_cast<uint64_t>(n) + static_cast<uint64_t>(i));
      } else {
        keys[i] = ps::kMaxKey / static_cast<ps::Key>(n) * static_cast<ps::Key>(i) + static_cast<ps::Key>(rank_);
      }
      vals[i] = static_cast<float>(i % 1000);
    }
    if (f_.keys == "hashed") std::sort(keys.begin(), keys.end());
    const long long bytes = static_cast<long long>(n) * (8 + 4);
    std::stringstream ss(f_.ops);
    std::string op;
    while (std::getline(ss, op, ',')) {
      auto once = [&]() {
        ps::SArray<float> out;
        auto start = Clock::now();
        int ts;
        if (op == "push") {
          ts = kv_.ZPush(keys, vals);
        } else if (op == "pull") {
          ts = kv_.ZPull(keys, &out);
        } else if (op == "pushpull") {
          ts = kv_.ZPushPull(keys, vals, &out);
        } else {
          std::fprintf(stderr, "cpp-psbench: unknown bulk operation %s\n", op.c_str());
          std::exit(2);
        }
        kv_.Wait(ts);
        return ms(Clock::now() - start);
      };
      barrier();
      once();  // unmeasured: the first transfer of a size grows the heaps
      std::vector<double> d;
      for (int i = 0; i < f_.repeat; ++i) {
        barrier();
        d.push_back(once());
      }
      double m = median(d);
      char extra[128];
      std::snprintf(extra, sizeof extra, "%.2f GB/s of keys and values", static_cast<double>(bytes) / (m / 1e3) / 1e9);
      result("bulk_" + op + (f_.keys == "hashed" ? "_hashed" : ""), n, bytes, m, "ms", extra);
    }
  }

  void latency() {
    ps::SArray<ps::Key> keys(1, static_cast<ps::Key>(rank_));
    ps::SArray<float> vals(1, 1.0f);
    std::vector<double> pp, ppl;
    barrier();
    for (int i = 0; i < f_.iters; ++i) {
      ps::SArray<float> out;
      auto start = Clock::now();
      kv_.Wait(kv_.ZPush(keys, vals));
      kv_.Wait(kv_.ZPull(keys, &out));
      pp.push_back(us(Clock::now() - start));
    }
    for (int i = 0; i < f_.iters; ++i) {
      ps::SArray<float> out;
      auto start = Clock::now();
      kv_.Wait(kv_.ZPushPull(keys, vals, &out));
      ppl.push_back(us(Clock::now() - start));
    }
    result("latency_push_pull_p50", 0, 0, median(pp), "us", "1-key push, wait, 1-key pull, wait");
    result("latency_push_pull_p99", 0, 0, percentile(pp, 0.99), "us", "");
    result("latency_pushpull_p50", 0, 0, median(ppl), "us", "1-key push-pull round trip");
    result("latency_pushpull_p99", 0, 0, percentile(ppl, 0.99), "us", "");
  }

  void rate(const std::string& name, long n, int window) {
    ps::SArray<ps::Key> keys(1, static_cast<ps::Key>(rank_));
    ps::SArray<float> vals(1, 1.0f);
    barrier();
    std::deque<int> ring;
    auto start = Clock::now();
    for (long i = 0; i < n; ++i) {
      if (static_cast<int>(ring.size()) == window) {
        kv_.Wait(ring.front());
        ring.pop_front();
      }
      ring.push_back(kv_.ZPush(keys, vals));
    }
    for (int ts : ring) kv_.Wait(ts);
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    char extra[128];
    std::snprintf(extra, sizeof extra, "%ld 1-key pushes per worker, %d outstanding", n, window);
    result(name, 0, 0, static_cast<double>(n) / secs, "req/s", extra);
  }

  void windowed() {
    rate("window" + std::to_string(f_.window) + "_push_rate", f_.requests, f_.window);
    long sync = f_.syncRequests >= 0 ? f_.syncRequests : std::max(f_.requests / 10, 1L);
    if (sync > 0) rate("sync_push_rate", sync, 1);
  }

  Flags f_;
  ps::KVWorker<float> kv_;
  int rank_;
};

}  // namespace

int main(int argc, char* argv[]) {
  Flags f = parseFlags(argc, argv);
  ps::Start(0);
  if (ps::IsServer()) {
    auto* server = new ps::KVServer<float>(0);
    server->set_request_handle(emptyHandle);
    ps::RegisterExitCallback([server]() { delete server; });
  }
  if (ps::IsWorker()) {
    Bench b(f);
    b.run();
  }
  ps::Finalize(0, true);
  return 0;
}
