// kv_rounds is a C++ ps-lite worker for jobs whose scheduler and servers are
// our Go nodes (tests/interop_replica_test.go): it pushes a one to a key of
// its own in every server's key range, round after round, printing
// "[worker R] round N done" after each, then pulls the keys back and checks
// that each holds exactly the rounds pushed. Run as a scheduler or server
// it only starts and finalizes (the Go programs serve).
//
// With replicated Go servers (PS_REPLICAS) a server killed and replaced
// while it runs costs it nothing: it routes every range to its home
// server, as C++ workers do, and resends (PS_RESEND) what the dead one left
// unanswered to the replacement, which answers once it has copied its
// range back.
//
// On success it prints "after N rounds: server0=.. server1=.. (lost [0 ..])"
// in test_recovery's words and exits 0; on a wrong value it prints the first
// and exits 1.
//
// Build against a C++ ps-lite build:
//   g++ -std=c++14 -O2 -pthread -isystem <ps-lite>/include kv_rounds.cc
//       <libps.a> -lzmq -lprotobuf -lpthread -o kv_rounds
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ps/ps.h"

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
  int pause_ms = argc > 2 ? std::atoi(argv[2]) : 100;
  ps::Start(0);
  if (ps::IsWorker()) {
    int rank = ps::MyRank();
    ps::KVWorker<int64_t> kv(0, 0);
    const std::vector<ps::Range>& ranges =
        ps::Postoffice::Get()->GetServerKeyRanges();
    std::vector<ps::Key> keys;
    std::vector<int64_t> ones;
    for (const ps::Range& r : ranges) {
      keys.push_back(r.begin() + static_cast<ps::Key>(rank));
      ones.push_back(1);
    }
    for (int i = 0; i < rounds; ++i) {
      kv.Wait(kv.Push(keys, ones));
      std::printf("[worker %d] round %d done\n", rank, i);
      std::fflush(stdout);
      usleep(pause_ms * 1000);
    }
    std::vector<int64_t> got;
    kv.Wait(kv.Pull(keys, &got));
    std::string counts, lost;
    bool ok = got.size() == keys.size();
    for (size_t s = 0; s < got.size(); ++s) {
      if (got[s] != rounds) {
        std::fprintf(stderr, "[worker %d] server %zu holds %lld for %d rounds\n",
                     rank, s, static_cast<long long>(got[s]), rounds);
        ok = false;
      }
      counts += " server" + std::to_string(s) + "=" + std::to_string(got[s]);
      lost += (s ? " 0" : "0");
    }
    if (!ok) {
      std::fprintf(stderr, "FAIL [worker %d]: wrong values\n", rank);
      return 1;
    }
    std::printf("[worker %d] after %d rounds:%s (lost [%s])\n", rank, rounds,
                counts.c_str(), lost.c_str());
    std::fflush(stdout);
  }
  ps::Finalize(0, true);
  return 0;
}
